"""test_state_condition.py's keyscale ratios over a range of seeds (session 65), through the test's own
keyscale_ratios: python3 keyscale_ratios.py FIRST LAST V from the repository root; prints the run's seconds and the
percentiles 0, 1, 5, 50, 95, 100 of both ratios (the figures in README.md were printed by the same arithmetic inlined
here before the test took it as a function)."""
import sys
import time

import numpy as np

sys.path.insert(0, "python/tests")
from test_state_condition import keyscale_ratios  # noqa: E402

t = time.time()
r = np.array([keyscale_ratios(s, int(sys.argv[3])) for s in range(int(sys.argv[1]), int(sys.argv[2]))])
print(time.time() - t)
print("near b1:", np.percentile(r[:, 0], [0, 1, 5, 50, 95, 100]))
print("rand b2:", np.percentile(r[:, 1], [0, 1, 5, 50, 95, 100]))
