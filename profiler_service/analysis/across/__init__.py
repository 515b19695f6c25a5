"""Across snapshots: two compared, a job's new snapshot verified against its last, whether two
captures are comparable, and what noise a step-time change must exceed."""
