"""The pure domain: what a scheduler decides, as functions of values.

States (the enums every layer shares), dependency rules (`deps`), a run's decision (`run_decision`),
admission to pools and limits (`admission`), schedules (`timetable`), templates (`templating`),
deadlines, callbacks and signal rules as values, and signal keys. No module here reads a clock,
a setting, a file or the database: everything is passed in, so every rule is tested as a function.
"""
