"""5. The guesses that start work early, and how each is checked at run time: a cicc on its own
module_id, the host compile split around fatbinary and its early stub, and when a guess pays."""
