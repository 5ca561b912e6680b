"""What tests, benchmarks and auditors use against a real database: `audit`, the invariant checks
over the event log (no run twice per logical date, no try launched twice, no pool over its slots...).
"""
