"""The Optuna search: ``search_study``, the Optuna journal and sampler, and the generations a
search asks for, which an executor runs."""
