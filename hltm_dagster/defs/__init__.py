"""The code location by domain: each folder holds its assets, checks, jobs, sensors and schedules
as one `Definitions` (`defs`), merged in `hltm_dagster.definitions`."""
