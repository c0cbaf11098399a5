"""Training plumbing shared by every trainer in ralm: optimisers, schedules, metric logs."""
