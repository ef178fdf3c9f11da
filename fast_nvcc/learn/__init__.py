"""6. What earlier compiles taught: each step's cost and peak memory, and how their guesses went."""
