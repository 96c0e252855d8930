"""Mean and 95% confidence interval of a few seeds' results (Student's t)."""
from __future__ import annotations

import math
from statistics import mean, stdev
from typing import Sequence

# two-sided 95% quantiles of Student's t by degrees of freedom; above 30 the normal's 1.96 is within 4%
T_975 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262, 10: 2.228,
         11: 2.201, 12: 2.179, 13: 2.160, 14: 2.145, 15: 2.131, 16: 2.120, 17: 2.110, 18: 2.101, 19: 2.093,
         20: 2.086, 21: 2.080, 22: 2.074, 23: 2.069, 24: 2.064, 25: 2.060, 26: 2.056, 27: 2.052, 28: 2.048,
         29: 2.045, 30: 2.042}


def t_interval(values: Sequence[float]) -> tuple[float, float, float]:
    """(mean, low, high): the 95% interval of the mean; a single value is its own interval."""
    centre = mean(values)
    if len(values) < 2:
        return centre, centre, centre
    half = T_975.get(len(values) - 1, 1.96) * stdev(values) / math.sqrt(len(values))
    return centre, centre - half, centre + half
