"""Fault tests: each one reproduces a defect found by a fault-and-bad-input pass."""
