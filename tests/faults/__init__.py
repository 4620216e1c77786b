"""Fault tests: each one reproduces a defect found by the fault-and-bad-input pass (issue 10)."""
