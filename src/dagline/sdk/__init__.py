"""What users' Spark jobs import: `dagline.sdk.client` (send signals) and `dagline.sdk.streaming`
(stop streaming queries cleanly when dagline asks). Standard library only, so a job needs nothing
but the dagline package; the old paths `dagline.client` and `dagline.streaming` still work, with a
DeprecationWarning.
"""
