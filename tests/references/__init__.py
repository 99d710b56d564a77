"""What the op parity grid (tests/ops/test_<op>.py, every device) and the metal-sim tests
(tests/metal/test_sim_<op>.py) share, one module per op: case inputs, numpy references, thresholds and
checks. Helpers only one of the two files uses stay in that file."""
