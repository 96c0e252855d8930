"""`r3l plan`: the memory a config needs on each device and the work of a step, from the model's shape alone."""
