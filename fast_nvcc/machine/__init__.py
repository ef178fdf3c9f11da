"""3. What every compile on the machine shares: the slot pool or the jobserver of the build tool
above, and the memory budget with its pressure guard."""
