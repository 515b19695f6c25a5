"""Across snapshots: two compared, a job's new snapshot verified against its last, whether two
captures are comparable, and what noise a step-time change must exceed. Above the snapshot model
(models.py), which these read; what a snapshot records of its check is below it, in
verification_record.py."""
