"""A grid study's run: preparing the results directory, the plan and backlog of packs, the
resume checks, the cost estimate (from ``reference_costs.json``), the progress and its
ETA, signals, and ``run_study`` itself."""
