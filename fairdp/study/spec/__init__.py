"""A study's spec: the YAML file read and validated into a ``StudySpec`` (its limits, the
sampler and model names it may use), and the rule that picks a study's default training
precision."""
