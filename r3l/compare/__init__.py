"""`r3l compare`: several configs x seeds on one environment, each run in its own directory (plan.py), then
one table and one plot of held-out success (summary.py, plot.py)."""
