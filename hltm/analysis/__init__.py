"""Analyses that keep the judge honest, Dagster-free: the monthly recall probe (`probe`) and the
statistics report with the model tender (`report`)."""
