"""TEST-ONLY (the e2e RLinf image): Python runs this at every start; it installs the fake-GPU count
(rlplace_test_gpu_count) before Ray or RLinf is imported."""

import rlplace_test_gpu_count

rlplace_test_gpu_count.install()
