"""The ``fairdp`` command. Bad input exits 2 with one line on stderr naming the field or file."""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import math
import sys

import yaml

from fairdp import __version__, schema
from fairdp._malloc import reuse_freed_memory
from fairdp.errors import InputError, RunAborted
from fairdp.schema import SELECTION_FAIRNESS

EXIT_INPUT = 2


class _Parser(argparse.ArgumentParser):
    """argparse that reports a usage error as one line, like every other input error."""

    def error(self, message: str):  # noqa: D401 - argparse's signature
        raise InputError(f"{self.prog}: {message}")


def _options(pairs: list[str]) -> dict:
    opts = {}
    for pair in pairs:
        key, sep, raw = pair.partition("=")
        if not sep or not key:
            raise InputError(f"--option '{pair}': expected KEY=VALUE")
        try:
            opts[key] = yaml.safe_load(raw)
        except yaml.YAMLError as e:
            raise InputError(f"--option {key}: cannot parse value {raw!r} ({str(e).splitlines()[0]})") from None
    return opts


def _cmd_data_list(args) -> int:
    from fairdp.data import dataset_names
    from fairdp.data._shared import data_dir, get_entry

    rows = []
    for name in dataset_names():
        entry = get_entry(name)
        if entry.kind == "fetched":
            status = "cached" if all(f.path.exists() for f in entry.files) else "not fetched"
        else:
            status = "-"
        rows.append((name, entry.kind, status, entry.description))
    _print_table(("dataset", "kind", "cache", "description"), rows)
    print(f"\ncache directory: {data_dir()}  (set FAIRDP_DATA_DIR to move it)")
    return 0


def _cmd_data_fetch(args) -> int:
    from fairdp.data._shared import fetch, get_entry

    entry = get_entry(args.name)
    if entry.kind != "fetched":
        raise InputError(
            f"dataset '{args.name}' is {entry.kind}, not fetched: "
            f"pass its files with `fairdp data describe {args.name} -o path=...`"
        )
    paths = fetch(entry.files)
    for f in entry.files:
        print(f"{paths[f.filename]}  sha256 {f.sha256}")
    return 0


def _cmd_data_describe(args) -> int:
    from fairdp.data import load_dataset

    opts = _options(args.option)
    summaries = [load_dataset(name, **opts).summary() for name in args.names]
    if args.json:
        print(json.dumps(summaries[0] if len(summaries) == 1 else summaries, indent=2))
        return 0
    _print_table(
        ("dataset", "rows", "features", "classes", "groups", "train", "valid", "test", "label", "sensitive"),
        [(d["name"], d["rows"], d["features"], d["classes"], d["groups"], *d["splits"].values(),
          d["label"], d["sensitive"]) for d in summaries],
    )
    for d in summaries:
        print(f"\n{d['name']}: {d['source']}")
        print("  classes: " + ", ".join(f"{n} {c}" for n, c in zip(d["class_names"], d["class_counts"])))
        print("  groups:  " + ", ".join(f"{n} {c}" for n, c in zip(d["group_names"], d["group_counts"])))
        for split in ("valid", "test"):  # where gaps are measured: each group's rows by class
            cells = (f"{n} {'/'.join(map(str, c))}" for n, c in zip(d["group_names"], d["split_group_class_counts"][split]))
            print(f"  {split + ':':9}" + ", ".join(cells) + f"  (rows by class: {'/'.join(d['class_names'])})")
        for fname, digest in d["sha256"].items():
            print(f"  sha256 {fname}: {digest}")
        print(f"  preprocessing: {d['preprocessing']}")
    return 0


AUDIT_MECHANISMS = ("laplace", "minmax", "l2")
"""The keys of ``fairdp.privacy.audit.MECHANISMS``, spelled out so that building the parser
does not import torch (tests check that the two agree)."""

AUDIT_MAX_DIM = 4096
"""Largest --dim: the audit holds thousands of rows of D floats at once, so a huge D would
exhaust memory rather than fail cleanly; encoders in use stay far below it."""

AUDIT_PROGRESS_SAMPLES = 100_000
"""From this many samples per input, ``fairdp audit`` reports its progress on stderr."""


def _progress_to_stderr(line: str) -> None:
    print(f"fairdp {line}", file=sys.stderr, flush=True)


def _cmd_audit(args) -> int:
    if not (math.isfinite(args.eps) and args.eps > 0):
        raise InputError(f"--eps must be a finite number > 0, got {args.eps}")
    if not 2 <= args.dim <= AUDIT_MAX_DIM:
        raise InputError(f"--dim must be in [2, {AUDIT_MAX_DIM}], got {args.dim}")
    if not 0 < args.confidence < 1:
        raise InputError(f"--confidence must be in (0, 1), got {args.confidence}")

    from fairdp.privacy.audit import MECHANISMS, MIN_SAMPLES, audit  # torch: after the cheap checks

    if args.samples < MIN_SAMPLES:
        raise InputError(f"--samples must be >= {MIN_SAMPLES}, got {args.samples}")
    target = MECHANISMS[args.mechanism]
    x, x_prime = target.worst_pair(args.dim)
    progress = _progress_to_stderr if args.samples >= AUDIT_PROGRESS_SAMPLES else None
    result = audit(lambda h: target.privatize(h, args.eps), x, x_prime, args.samples,
                   confidence=args.confidence, seed=args.seed, progress=progress)
    claimed = target.claimed_eps(args.eps, args.dim)
    record = {
        "mechanism": args.mechanism,
        "description": target.description,
        "dim": args.dim,
        "eps": args.eps,
        "seed": args.seed,
        "claimed_eps": claimed,
        "true_eps": target.true_eps(args.eps, args.dim),
        # the lower bound exceeding the claim refutes it at the stated confidence
        "verdict": "VIOLATED" if result.eps_lower > claimed else "consistent",
        **result.to_dict(),
    }
    if args.json:
        print(json.dumps(record, indent=2))
        return 0
    level = f"{args.confidence:.4g}"
    _print_table(
        ("mechanism", "dim", "claimed eps", "true eps", "eps lower bound", "confidence", "verdict"),
        [(args.mechanism, args.dim, f"{claimed:.4g}", f"{record['true_eps']:.4g}",
          f"{result.eps_lower:.4g}", level, record["verdict"])],
    )
    held = args.samples - args.samples // 2
    other = "x_prime" if result.numerator == "x" else "x"
    print(f"\n{target.description}")
    print(f"event E: {result.event}, chosen on {args.samples // 2} samples per input;")
    print(f"  on {held} held-out samples per input, P[M({result.numerator}) in E] >= "
          f"{result.p_lower:.4g} and P[M({other}) in E] <= {result.p_upper:.4g}")
    if result.eps_lower > claimed:
        print(f"the claim eps = {claimed:.4g} is refuted at confidence {level}")
    return 0


AUDIT_TRAINING_METHODS = ("dpsgd", "pfld", "dpsgd_global_adapt", "dpsgd_f", "dp_fermi")
"""The keys of ``fairdp.testing.training_audit.METHODS``, spelled out so that building the
parser does not import torch (tests check that the two agree)."""

AUDIT_CANARY_KINDS = ("gradient", "input")
"""``fairdp.testing.training_audit.CANARY_KINDS``, spelled out for the same reason."""


def _cmd_audit_training(args) -> int:
    """One-run audit (Steinke, Nasr and Jagielski 2023) of one DP-SGD or PF-LD config: train it
    once with canaries, guess their signs from what the auditor sees, print the claimed eps
    beside the empirical lower bound and the most the audit could show; for PF-LD also the
    audit of its dual release on its own. With ``--spec`` the config is one of a study's, on its
    data, its modules (a user's own included) and its training settings. Writes nothing;
    progress on stderr."""
    if args.spec is not None:
        given = [flag for flag, value in (("--eps", args.eps), ("--clip", args.clip), ("--clip-dual", args.clip_dual),
                                          ("--notion", args.notion), ("--dataset", args.dataset),
                                          ("-o/--option", args.option)) if value]
        if given:
            raise InputError(f"{given[0]}: taken from the study with --spec (its config, dataset and settings); "
                             "give --config N to choose the config")
    else:
        if args.config is not None:
            raise InputError("--config: only with --spec STUDY.yaml")
        if args.method is None or args.eps is None:
            raise InputError(f"{'--method' if args.method is None else '--eps'}: required (or give --spec STUDY.yaml)")
        if not (math.isfinite(args.eps) and args.eps > 0):
            raise InputError(f"--eps must be a finite number > 0, got {args.eps}")
    if not 0 < args.confidence < 1:
        raise InputError(f"--confidence must be in (0, 1), got {args.confidence}")
    if args.canaries < 2:
        raise InputError(f"--canaries must be >= 2, got {args.canaries}")
    k_pos = args.canaries // 10 if args.k_positive is None else args.k_positive
    k_neg = args.canaries // 10 if args.k_negative is None else args.k_negative
    if k_pos < 0 or k_neg < 0 or not 1 <= k_pos + k_neg <= args.canaries:
        raise InputError(f"--k-positive + --k-negative must be in [1, --canaries = {args.canaries}], "
                         f"each >= 0, got {k_pos} + {k_neg}")
    for flag, value in (("--epochs", args.epochs), ("--batch-size", args.batch_size)):
        if value is not None and value < 1:
            raise InputError(f"{flag} must be >= 1, got {value}")
    if args.rows is not None and args.rows < 10:
        raise InputError(f"--rows must be >= 10, got {args.rows}")
    if args.seed < 0:
        raise InputError(f"--seed must be >= 0, got {args.seed}")
    for flag, value in (("--noise-scale", args.noise_scale), ("--canary-norm", args.canary_norm)):
        if value is not None and not (math.isfinite(value) and value > 0):
            raise InputError(f"{flag} must be a finite number > 0, got {value}")
    if args.lr is not None and not (math.isfinite(args.lr) and args.lr > 0):
        raise InputError(f"--lr must be a finite number > 0, got {args.lr}")
    if args.dual_samples < 1000:
        raise InputError(f"--dual-samples must be >= 1000, got {args.dual_samples}")

    from fairdp.data._shared import subsample  # after the cheap checks
    from fairdp.testing.training_audit import (
        BLIND_TO,
        DETECTS,
        DUAL_BLIND_TO,
        DUAL_DETECTS,
        audit_dual_release,
        audit_training,
    )

    if args.spec is not None:
        method, config, data, train, arch, chosen = _study_config(args.spec, args.method, args.config)
        if args.batch_size is not None and "batch_size" in config:
            raise InputError(f"--batch-size: the study's config {args.config or 0} names its own batch_size "
                             f"({config['batch_size']})")
        epochs = train.epochs if args.epochs is None else args.epochs
        batch_size = train.batch_size if args.batch_size is None else args.batch_size
        device = train.device
    else:
        from fairdp.data import load_dataset

        method, chosen, train, arch, device = args.method, None, None, None, "cpu"
        epochs = 5 if args.epochs is None else args.epochs
        batch_size = 100 if args.batch_size is None else args.batch_size
        data = load_dataset(args.dataset or "synthetic", **_options(args.option))
        config = {"eps": args.eps, "clip_primal": 1.0 if args.clip is None else args.clip}
        if method == "pfld":
            config = {"fairness_notion": args.notion or "dp", **config,
                      "clip_dual": 1.0 if args.clip_dual is None else args.clip_dual}
        if method not in ("dpsgd", "pfld"):  # its other settings (Z_0, lambda, the count's noise): its paper grid's
            from fairdp.methods import get_method

            impl = get_method(method)
            config = {**impl.expand(impl.paper_grid(data.name))[0], **config}
    if method != "pfld" and args.no_dual_noise:
        raise InputError("--no-dual-noise: only pfld releases dual values")
    dual = method == "pfld" and not args.no_dual_audit
    if dual and epochs < 2:
        raise InputError("--epochs must be >= 2 for PF-LD's dual release audit (PF-LD releases dual values after "
                         "every epoch but the last), or pass --no-dual-audit")
    if args.rows is not None:
        data = subsample(data, args.rows, args.seed)
    if chosen is not None:
        _progress_to_stderr(f"audit-training: {chosen}")
    result = audit_training(method, config, data, canaries=args.canaries, canary_kind=args.canary_kind,
                            k_positive=k_pos, k_negative=k_neg, epochs=epochs, batch_size=batch_size,
                            lr=args.lr, seed=args.seed, beta=1 - args.confidence, canary_norm=args.canary_norm,
                            noise_scale=args.noise_scale, clipping=not args.no_clipping,
                            noise_first_layer_only=args.first_layer_noise_only, dual_noise=not args.no_dual_noise,
                            train=train, arch=arch, device=device, progress=_progress_to_stderr)
    released = None
    if dual:
        released = audit_dual_release(config, data, epochs=epochs, batch_size=batch_size,
                                      samples=args.dual_samples, seed=args.seed, beta=1 - args.confidence,
                                      noise_scale=args.noise_scale, dual_noise=not args.no_dual_noise,
                                      train=train, arch=arch, device=device, progress=_progress_to_stderr)
    # a lower bound exceeding the claim refutes it at the stated confidence
    refuted = result.refuted or (released is not None and released.refuted)
    verdict = "REFUTED" if refuted else "consistent"
    if args.json:
        record = {**result.to_dict(), "confidence": args.confidence, "verdict": verdict,
                  "detects": list(DETECTS[result.canary_kind]), "blind_to": list(BLIND_TO[result.canary_kind])}
        if released is not None:
            record["dual_release"] = {**released.to_dict(), "verdict": "REFUTED" if released.refuted else "consistent",
                                      "detects": list(DUAL_DETECTS), "blind_to": list(DUAL_BLIND_TO)}
        if chosen is not None:
            record["study_config"] = chosen
        print(json.dumps(record, indent=2))
        return 0
    level = f"{args.confidence:.4g}"
    shown = ", ".join(f"{k}={v}" for k, v in result.config.items())
    rows = [(method, shown, f"one run, {result.canaries} {result.canary_kind} canaries",
             f"{result.claimed_eps:.4g}", f"{result.claimed_delta:.3g}", f"{result.eps_lower:.4g}",
             f"{result.eps_ceiling:.4g}", f"{result.correct}/{result.guesses} right", level,
             "REFUTED" if result.refuted else "consistent")]
    if released is not None:
        rows.append((method, shown, f"dual release, {released.samples} draws per dataset",
                     f"{released.claimed_eps:.4g}", f"{released.claimed_delta:.3g}", f"{released.eps_lower:.4g}",
                     f"{released.eps_ceiling:.4g}", f"attribute {1 if released.numerator == 'x' else 0} favoured", level,
                     "REFUTED" if released.refuted else "consistent"))
    _print_table(("method", "config", "audit", "claimed eps", "delta", "eps lower bound", "largest showable",
                  "evidence", "confidence", "verdict"), rows)
    where = "attribute 1" if method == "pfld" else "in the training set"
    if method == "pfld" and result.canary_kind == "input":
        where += "; every input canary is a training record"
    print(f"\n{result.dataset}: {result.n_train} train rows; {result.canaries} {result.canary_kind} canaries, "
          f"{result.positive_signs} with sign +1 ({where}); {result.epochs} epochs, batch {result.batch_size}, "
          f"seed {result.seed}")
    if result.canaries_per_group:
        print("canaries per parameter: " + ", ".join(f"{k} {v}" for k, v in result.canaries_per_group.items()))
    print(f"adjacency: {result.adjacency}")
    print(f"guesses: the {result.k_positive} highest scores +1 ({result.correct_positive} right), the "
          f"{result.k_negative} lowest -1 ({result.correct - result.correct_positive} right)")
    if result.planted_bug:
        bugs = ([f"noise multipliers x{result.noise_scale:g}"] if result.noise_scale != 1.0 else []) + \
            ([] if result.clipping else ["per-row clipping off"]) + \
            (["noise on the first layer only"] if result.noise_first_layer_only else []) + \
            ([] if result.dual_noise else ["dual sums and counts released without noise"])
        print(f"planted bug: {', '.join(bugs)} (the claim is the correct run's)")
    print(f"eps lower bound: a lower bound (Steinke et al. 2023, Theorem 3): it can refute the claim, never prove "
          f"it; the largest eps it can show is {result.eps_ceiling:.4g} ({result.guesses} guesses among "
          f"{result.canaries} canaries, all right)")
    if result.claimed_eps >= result.eps_ceiling:
        print(f"  the claim eps = {result.claimed_eps:.4g} is at or above that: this audit cannot refute it "
              f"(more canaries, or a smaller --eps, can)")
    print("it detects: " + "; ".join(DETECTS[result.canary_kind]))
    print("it cannot detect: " + "; ".join(BLIND_TO[result.canary_kind]))
    if released is not None:
        print(f"dual release: train row {released.target_row}'s attribute 1 against 0 (its clipped h "
              f"{released.target_h:.3g}), sigma_d {released.sigma_dual:.4g}; event {released.event}: "
              f"P >= {released.p_lower:.4g} against <= {released.p_upper:.4g}; the largest eps it can show is "
              f"{released.eps_ceiling:.4g}")
        print("  it detects: " + "; ".join(DUAL_DETECTS))
        print("  it cannot detect: " + "; ".join(DUAL_BLIND_TO))
    if refuted:
        print(f"the claim eps = {result.claimed_eps:.4g} is refuted at confidence {level}")
    return 0


def _study_config(path: str, method: str | None, index: int | None):
    """``audit-training --spec``: (method, config, data, training settings, architecture, a line
    saying which) of config ``index`` (default 0) of the study's DP-SGD or PF-LD grid, its data
    loaded and its modules checked as ``fairdp run`` checks them."""
    from dataclasses import replace

    from fairdp.study import load_spec
    from fairdp.study._shared import check_models, load_study_data

    spec = load_spec(path)
    audited = [m for m in spec.methods if m.name in AUDIT_TRAINING_METHODS]
    names = ", ".join(m.name for m in spec.methods)
    if method is not None:
        plan = next((m for m in audited if m.name == method), None)
        if plan is None:
            raise InputError(f"--method {method}: the study {spec.name} has no {method} grid (its methods: {names})")
    elif len(audited) == 1:
        plan = audited[0]
    elif not audited:
        raise InputError(f"--spec {path}: the study {spec.name} has no {' or '.join(AUDIT_TRAINING_METHODS)} grid to "
                         f"audit (its methods: {names})")
    else:
        raise InputError(f"--method: the study {spec.name} has {' and '.join(m.name for m in audited)} grids; "
                         "say which to audit")
    index = 0 if index is None else index
    if not 0 <= index < len(plan.configs):
        raise InputError(f"--config: the study's {plan.name} grid has {len(plan.configs)} configs (0 to "
                         f"{len(plan.configs) - 1}), got {index}")
    data = load_study_data(spec.dataset, spec.dataset_options)
    check_models(spec, data, [plan.name])
    settings = spec.method_settings[plan.name]
    config = dict(plan.configs[index])
    arch = settings.architecture
    models = "" if arch is None or not arch.models else \
        "; " + ", ".join(f"{role} {ref.describe()}" for role, ref in arch.models)
    chosen = (f"the study {spec.name}, {plan.name} config {index} of {len(plan.configs)} "
              f"({', '.join(f'{k}={v}' for k, v in config.items())}) on {spec.dataset}{models}")
    return plan.name, config, data, replace(spec.train, lr=settings.lr), arch, chosen


def _draws(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 2:
        raise InputError(f"--draws: expected an integer >= 2, got {text!r}")
    return value


def _keys(text: str) -> list[str]:
    keys = [t.strip() for t in text.split(",") if t.strip()]
    if not keys:
        raise argparse.ArgumentTypeError(f"expected comma-separated column names, got {text!r}")
    return keys


def _by_keys(text: str) -> list[str]:
    """``--by``'s columns; an empty value is no columns (to override a study's selection.by)."""
    return _keys(text) if text.strip() else []


def _seed_list(text: str | None) -> list[int] | None:
    if text is None:
        return None
    try:
        return [int(t) for t in text.split(",") if t.strip()]
    except ValueError:
        raise InputError(f"--seeds: expected comma-separated integers like 0,1,2, got {text!r}") from None


def _cmd_run(args) -> int:
    from fairdp.study import load_spec, run_study
    from fairdp.study._shared import DEFAULT_EXECUTOR, selection_text, with_overrides

    spec = with_overrides(load_spec(args.study), _seed_list(args.seeds), args.epochs)
    try:
        summary = run_study(spec, args.results, args.address, repair=args.repair,
                            executor=args.executor or DEFAULT_EXECUTOR, dry_run=args.dry_run,
                            checkpoint_every_s=args.checkpoint_every, progress_stream=sys.stderr, compact=args.compact)
    except KeyboardInterrupt:  # outside a pack (planning, between packs, the seed's compaction)
        print(f"fairdp run: interrupted; what finished is stored in {args.results}, and the same command resumes",
              file=sys.stderr)
        return 130
    if args.dry_run:
        print("\n".join(summary.plan_lines), file=sys.stderr)
        return 0
    if summary.unfinished_packs:
        print(f"fairdp run: interrupted: {summary.unfinished_packs} of {summary.packs} packs did not finish; "
              f"what finished is stored in {summary.results}, and the same command resumes", file=sys.stderr)
        return 130
    failed = f", {summary.failed_packs} packs failed (stored as errors; rerun to retry)" if summary.failed_packs else ""
    print(f"\n{spec.name}: {summary.configs} configs in {summary.packs} packs run, {summary.already_stored} "
          f"already stored{failed}; {summary.wall_s:.0f} s; results in {summary.results}\n")
    # the study's selection, as stored beside the results: what fairdp analyze prints for them
    print(f"fairdp run: selection from the study {spec.name}: "
          + ", ".join(selection_text(k, v) for k, v in (("fairness", spec.fairness), ("rt", spec.rt), ("by", spec.by)))
          + "; stored with the results, fairdp analyze, report and compare default to it", file=sys.stderr)
    _print_results(summary.results, spec.fairness, spec.rt, spec.by)
    return 1 if summary.failed_packs else 0


def _cmd_search(args) -> int:
    import dataclasses

    from fairdp.study import load_spec, search_study
    from fairdp.study._shared import DEFAULT_EXECUTOR, with_overrides

    spec = with_overrides(load_spec(args.study), None, args.epochs)
    if spec.search is None:
        raise InputError(f"{args.study}: search: the study has no search block")
    seeds = _seed_list(args.seeds)
    seeds = [spec.search.seed] if seeds is None else seeds  # an empty --seeds is refused, never the default
    with_overrides(spec, seeds)  # the run's checks of --seeds
    status = 0
    for seed in seeds:  # one search, one Optuna study, per seed
        one = dataclasses.replace(spec, search=dataclasses.replace(spec.search, seed=seed))
        summary = search_study(one, args.results, args.address, trials=args.trials, mode=args.mode,
                               executor=args.executor or DEFAULT_EXECUTOR, dry_run=args.dry_run, checkpoint_every_s=args.checkpoint_every,
                               repair=args.repair, progress_stream=sys.stderr)
        if args.dry_run:
            print("\n".join(summary.plan_lines), file=sys.stderr)
        else:
            _print_search(one, summary)
    if not args.dry_run:
        from fairdp.study import StoredSelection
        from fairdp.study._shared import selection_text

        stored = StoredSelection.of_spec(spec, searched=True)
        print("fairdp search: stored with the results: the study's selection ("
              + ", ".join(selection_text(k, getattr(stored, k)) for k in ("fairness", "rt", "by"))
              + f") and the search's objectives, {stored.search.describe()}; fairdp report draws the search's "
                "Pareto fronts on them", file=sys.stderr)
    return status


def _print_search(spec, summary) -> None:
    search = spec.search
    answered = f", {summary.answered} answered from stored rows" if summary.answered else ""
    print(f"\n{spec.name} (seed {summary.seed}): {summary.trials_run} trials completed by this run ({summary.mode})"
          f"{answered}, of the {summary.trials_total} the search asks for; {summary.wall_s:.0f} s; rows in {summary.results}, Optuna journal "
          f"{summary.journal}\n")
    print(f"Pareto front of {search.method} over "
          + ", ".join(f"{k} ({v})" for k, v in search.objectives.items())
          + (f", feasible under {'; '.join(map(str, search.constraints))}" if search.constraints else "")
          + f": {len(summary.front)} configs\n")
    if search.constraints and (not len(summary.front) or any(summary.excluded.values())):
        print("rows each constraint makes infeasible (of " + f"{summary.rows}): "
              + "; ".join(f"{c}: {n}" for c, n in summary.excluded.items())
              + ("; no row meets them all: loosen a constraint or search further" if not len(summary.front) else "")
              + "\n")
    cols = [c for c in summary.front.columns if c not in ("method", "seed", "feasible")]
    if cols:
        _print_table(tuple(cols), [tuple(_fmt(v) for v in row) for row in summary.front[cols].itertuples(index=False)])
    if len(summary.history):
        print("\nnormalised hypervolume of the feasible front (reference: each objective's worst value)\n")
        _print_table(("trials", "feasible", "front", "hypervolume"),
                     [(r.trials, r.feasible_trials, r.front_size, f"{r.hypervolume:.4f}")
                      for r in summary.history.itertuples(index=False)])


def _fmt(v) -> str:
    return f"{v:.4g}" if isinstance(v, float) else str(v)


def _load_rows(dirs: list[str], pool: bool = False, without=()):
    """The rows of ``dirs`` (``without`` those columns); rows of several studies only with
    ``pool`` (a selection would otherwise mix, say, a grid's and a search's configs into one run
    without notice)."""
    from fairdp.study import read_results

    df = read_results(*dirs, without=without)
    studies = sorted(df["study"].dropna().astype(str).unique()) if "study" in df.columns else []
    if len(studies) > 1:
        if not pool:
            raise InputError(f"{', '.join(dirs)}: rows of {len(studies)} studies ({', '.join(studies)}), whose configs "
                             f"would be pooled into one selection per seed; pass --pool to do that on purpose, or "
                             f"analyze each study alone")
        print(f"fairdp: pooling the rows of studies {', '.join(studies)} into one selection per (dataset, method, "
              f"seed)", file=sys.stderr)
    return df


def _curves(dirs: list[str], rows):
    """The per-epoch curves stored beside the results ``dirs`` (a Parquet file of rows has none)
    of the configs in ``rows``, the rows already read from them."""
    from pathlib import Path

    from fairdp.study import read_history

    return read_history(*[d for d in dirs if not Path(d).is_file()], rows=rows)


def _cmd_analyze(args) -> int:
    import warnings

    from fairdp.analysis import (
        aggregate_seeds,
        format_table,
        mark_constant_picks,
        released_guarantees,
        seed_intervals,
        select_by_rt,
        selected_configs,
        with_constant_picks,
    )
    from fairdp.analysis._shared import (
        check_level,
        check_rt,
        has_release_events,
        render_table,
        seed_advice_text,
        selected_with_intervals,
    )

    if args.rt is not None:
        check_rt(args.rt, "--rt")
    if not (math.isfinite(args.advise_width) and args.advise_width > 0):
        raise InputError(f"--advise-width must be a finite number of points > 0, got {args.advise_width}")
    level = check_level(args.ci, "--ci") if args.ci is not None else None
    df = _load_rows(args.dirs, args.pool)
    chosen = _chosen_selection("analyze", args, args.dirs, keys=("fairness", "rt", "by", "private"))
    fairness, rt, by = chosen.values["fairness"], chosen.values["rt"], list(chosen.values["by"])
    whole = _completeness(df, args.dirs, chosen)
    private_line = None
    if args.private_cost and chosen.values["private"] is None:
        raise InputError("--private-cost: needs a private selection (--private-selection EPS, or the study's "
                         "selection.private)")
    if args.private_cost:
        from fairdp.analysis import private_pick_cost

        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            cost = private_pick_cost(df, chosen.values["private"], rt, fairness, by)
        print(f"fairdp analyze: {chosen.message}", file=sys.stderr)
        for w in caught:
            print(f"fairdp analyze: warning: {w.message}", file=sys.stderr)
        sys.stdout.write(render_table(cost, fmt=args.format, decimals=2))
        return 0
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        df = _privately(df, chosen)
        selected = select_by_rt(df, rt=rt, fairness=fairness, by=by)
        if chosen.values["private"] is not None and has_release_events(df):
            selected = released_guarantees(df, selected, rt, by)
            private_line = _private_total_line(selected)
        if args.selected:
            if has_release_events(df) and "eps_released" not in selected.columns:
                selected = released_guarantees(df, selected, rt, by)
            table = selected_configs(selected, fairness)
            if level is not None:
                table = selected_with_intervals(selected, table, fairness, level, args.draws)
            out = render_table(mark_constant_picks(table, selected), fmt=args.format)
        else:
            agg = with_constant_picks(aggregate_seeds(selected, fairness=fairness, by=by), selected, by)
            advice = seed_advice_text(agg, args.advise_width, level or 95.0)
            if level is not None:
                agg = seed_intervals(agg, level)
            out = format_table(agg, fmt=args.format, fairness=fairness, by=by)
    print(f"fairdp analyze: {chosen.message}", file=sys.stderr)
    if private_line:
        print(f"fairdp analyze: {private_line}", file=sys.stderr)
    if not args.selected and advice:
        print(f"fairdp analyze: {advice}", file=sys.stderr)
    if level is not None:
        what = (f"{level:g}% bootstrap intervals over each row's test examples, stratified by group, "
                f"{args.draws} resamples" if args.selected else
                f"mean ± std [{level:g}% t-interval of the mean over seeds]")
        print(f"fairdp analyze: {what}", file=sys.stderr)
    for w in caught:
        print(f"fairdp analyze: warning: {w.message}", file=sys.stderr)
    if whole.is_partial:
        print(f"fairdp analyze: warning: {whole.text}", file=sys.stderr)
    sys.stdout.write(out)
    return 0


def _private_total_line(selected) -> str:
    """Each method's total eps of its private picks (training and the count release), largest
    over runs: what the aggregate table's picks cost, said beside it."""
    parts = []
    for method, eps in selected.groupby("method", sort=True)["eps_released"]:
        parts.append(f"{method} {eps.min():.3g}-{eps.max():.3g}" if eps.notna().any() else f"{method} not covered")
    return ("private selection: each pick's total eps (its training and its noisy validation counts composed, "
            "smallest-largest over its runs; --selected lists each): " + ", ".join(parts))


PICKS_LISTED = 200
"""``fairdp compare`` lists every RT pick up to this many, else the picks that differ (``--all-picks``: all)."""


def _cmd_compare(args) -> int:
    import warnings

    from fairdp.analysis import (
        compare_picks,
        device_differences,
        paired_tests,
        protocol_differences,
    )
    from fairdp.analysis._shared import (
        CODE_SETTING,
        check_rt,
        describe_devices,
        identical_configs,
        precisions,
        render_table,
    )

    if args.rt is not None:
        check_rt(args.rt, "--rt")
    if not (math.isfinite(args.resolution) and args.resolution > 0):
        raise InputError(f"--resolution must be a finite number of points > 0, got {args.resolution}")
    # compare reads no confusion counts: their text is most of a large store's memory
    a, b = (_load_rows([d], without=tuple(schema.CONFUSION_COLUMNS.values())) for d in (args.a, args.b))
    chosen = _chosen_selection("compare", args, [args.a, args.b])
    fairness, rt, by = chosen.values["fairness"], chosen.values["rt"], list(chosen.values["by"])
    protocol = protocol_differences(a, b)
    settings = protocol[protocol["setting"] != CODE_SETTING]
    across = set(map(tuple, settings[["dataset", "method"]].to_numpy()))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # rows excluded from a selection are analyze's to list
        picks = compare_picks(a, b, rt, fairness, by)
        tests = paired_tests(picks, fairness, by=by, across=across, resolution=args.resolution)
    same, common, gap = identical_configs(a, b)
    device = device_differences(a, b)
    print(f"fairdp compare: {chosen.message}", file=sys.stderr)
    if args.format == "csv":
        sys.stdout.write(render_table(tests, "csv"))
        return 0
    bitwise = (f"all {common} configs in both are bit-identical" if common and same == common else
               f"{same} of {common} configs in both are bit-identical (largest valid-accuracy difference "
               f"{gap:.2f} points)")
    verdicts = tests["verdict"].value_counts().to_dict()
    print(f"fairdp compare {args.a} {args.b}: {bitwise}; RT picks the same config in "
          f"{int(picks['same_pick'].sum())} of {len(picks)} (dataset, method, seed); paired tests over seeds: "
          + ", ".join(f"{n} {v}" for v, n in sorted(verdicts.items())))
    if len(settings):
        named = sorted(set(settings["setting"]))
        print(f"protocol: the runs differ in {', '.join(named)} (below): their verdicts are across protocols, "
              "a difference is the settings' as much as the method's")
    else:
        print("protocol: the same in both runs (every protocol setting the rows record)")
    code = protocol[protocol["setting"] == CODE_SETTING]
    if len(code):
        print(f"code: fairdp {code['a'].iloc[0]} (A) against {code['b'].iloc[0]} (B): a difference may come from "
              "the code too")
    in_a, in_b = precisions(a), precisions(b)
    if in_a != in_b:  # e.g. a study without train.precision on CPUs that differ in bf16
        print(f"precision: A computed in {', '.join(in_a) or 'none recorded'}, B in {', '.join(in_b) or 'none recorded'}")
    print(f"device: A {describe_devices(a)}; B {describe_devices(b)}")
    if device and device[0][0] == "device":
        print("  a run does not record its device (rows written before fairdp recorded it): whether its rows can be "
              "bit-identical to the other's is unknown")
    elif device:
        print(f"  they differ in {', '.join(f for f, _, _ in device)}: bit-identity not expected, and \"within seed "
              "noise\" is the question")
    if len(protocol):
        print("\n## Protocol differences\n")
        sys.stdout.write(render_table(_protocol_display(protocol, picks), "md"))
    per = f", per {', '.join(by)}" if by else ""
    print(f"\n## RT picks (rt {rt:g}, {fairness}{per}): A = {args.a}, B = {args.b}\n")
    listed = picks if args.all_picks or len(picks) <= PICKS_LISTED else picks[~picks["same_pick"].astype(bool)]
    if len(listed) < len(picks):  # a million rows hold a hundred thousand picks: the differing ones say it
        print(f"{len(picks) - len(listed)} of {len(picks)} picks are the same config in both runs and are not listed "
              f"(--all-picks lists every pick){':' if len(listed) else '.'}\n")
    if len(listed):
        sys.stdout.write(render_table(_compare_display(listed), "md"))
    print("\n## Paired differences A - B over seeds (mean, 95% t-interval, two-sided p, smallest difference the "
          f"test detects: alpha 0.05, 80% power; 'within seed noise' needs it at most {args.resolution:g} "
          f"point{'' if args.resolution == 1 else 's'})\n")
    sys.stdout.write(render_table(_compare_display(tests), "md"))
    print("\nBit-identical rows need the same device and the same builds (torch, its BLAS, oneDNN); elsewhere "
          "\"within seed noise\" is what to expect, \"differ\" says the runs disagree beyond it, and \"not resolved\" "
          "that the seeds at hand could not have told.")
    return 0


def _protocol_display(protocol, picks):
    """The protocol differences with one row per (dataset, setting, A, B): the methods they
    hold for, "every method" when they hold for all the runs have in common."""
    methods = picks.groupby("dataset")["method"].unique().apply(lambda m: sorted(set(m))).to_dict()
    rows = []
    for (ds, setting, a, b), g in protocol.groupby(["dataset", "setting", "a", "b"], sort=False):
        held = sorted(set(g["method"]))
        rows.append({"dataset": ds, "methods": "every method" if held == methods.get(ds, []) else ", ".join(held),
                     "setting": setting, "A": a, "B": b})
    return __import__("pandas").DataFrame(rows)


def _compare_display(table):
    """compare's tables as the other tables show numbers: points with 2 decimals, p with 3."""
    out = table.copy()
    for c in out.columns:
        if c == "p_value":
            out[c] = [("-" if v != v else "<0.001" if v < 0.001 else f"{v:.3f}") for v in out[c]]
        elif out[c].dtype.kind == "f":
            out[c] = [("-" if v != v else f"{v:.2f}") for v in out[c]]
    return out


SELECTION_FLAGS = {"fairness": "--fairness", "rt": "--rt", "by": "--by", "rts": "--rts", "private": "--private-selection"}


def _chosen_selection(command: str, args, dirs: list[str], keys=("fairness", "rt", "by")):
    """The selection ``command`` uses over ``dirs``: each key from its flag when given, else
    from the study's selection stored with the results, else fairdp's default. The command says
    it on stderr once it has succeeded (a failing command prints only its error)."""
    from fairdp.study import choose_selection, read_selections

    given = {k: getattr(args, k) for k in keys if k != "private"}
    if "private" in keys:
        given["private"] = _private_selection(args)
    if given.get("by") is not None:
        given["by"] = tuple(given["by"])
    if given.get("rts") is not None:
        given["rts"] = tuple(given["rts"])
    return choose_selection(read_selections(*dirs), given, {k: SELECTION_FLAGS[k] for k in keys})


def _private_selection(args):
    """``--private-selection EPS`` (and ``--private-seed``) as a ``PrivateSelection``; None without it."""
    from fairdp.privacy._shared import PrivateSelection

    if args.private_selection is None:
        return None
    try:
        return PrivateSelection(args.private_selection, seed=args.private_seed)
    except InputError as e:
        raise InputError(f"--private-selection: {str(e).split(': ', 1)[1]}") from None


def _privately(df, chosen):
    """``df`` as the chosen selection reads it: with a private selection, every validation metric
    recomputed from its run's noisy validation counts (``private_valid_metrics``)."""
    private = chosen.values.get("private")
    if private is None:
        return df
    from fairdp.analysis import private_valid_metrics

    return private_valid_metrics(df, private, tuple(chosen.values["by"]))


def _add_private_options(parser) -> None:
    parser.add_argument("--private-selection", type=float, metavar="EPS",
                        help="pick from each run's validation counts released with discrete Gaussian noise at EPS "
                             "(delta 1e-5): the pick's eps_released is then its training and that release composed "
                             "(default: the study's selection.private, else the clear counts)")
    parser.add_argument("--private-seed", type=int, default=0, metavar="N",
                        help="the noise's stream, for a reproducible table (default 0)")
    if parser.prog.endswith("analyze"):
        parser.add_argument("--private-cost", action="store_true",
                            help="with a private selection: per (dataset, method, by) how often the private pick is "
                                 "the clear one, the test accuracy it gives up and the violation it adds, and both "
                                 "picks' eps, instead of the aggregate table")


def _completeness(df, dirs: list[str], chosen):
    """Whether ``df`` (the rows of ``dirs``) is every config the runs into ``dirs`` planned;
    ``chosen`` (``_chosen_selection`` over ``dirs``) says whether a search wrote them, which
    plans nothing in advance."""
    from fairdp.analysis import completeness, summarise
    from fairdp.study import read_plans

    plans = read_plans(*dirs)
    return summarise(completeness(df, plans), searched=plans is None and chosen.search is not None)


def _rt_list(text: str) -> list[float]:
    try:
        rts = [float(t) for t in text.split(",") if t.strip()]
    except ValueError:
        raise InputError(f"--rts: expected comma-separated numbers like 0,1,2, got {text!r}") from None
    bad = [r for r in rts if not r >= 0]
    if not rts or bad:
        raise InputError(f"--rts: relaxation thresholds must be >= 0, got {text!r}")
    return rts


def _check_report_outside_results(output: str, dirs: list[str]) -> None:
    """A report inside a results directory must sit under a '_' or '.' name: pandas, pyarrow,
    polars and duckdb readers of the directory would otherwise read its files as rows."""
    from pathlib import Path

    from fairdp.study import ResultStore

    out = Path(output).resolve()
    for d in dirs:
        # a file:// URI names a local directory too; other URIs are not local (and opening one may need a network)
        root = Path(ResultStore(d).root if d.startswith("file://") else d).resolve()
        if not root.is_dir() or (out != root and root not in out.parents):
            continue
        if out == root or not out.relative_to(root).parts[0].startswith(("_", ".")):
            raise InputError(f"-o: {output} is inside the results directory {d}, whose Parquet readers would "
                             f"read the report's files; use {Path(d) / '_report'} or a path outside it")


def _cmd_report(args) -> int:
    import warnings

    from fairdp._atomic import output_dir
    from fairdp.analysis import ReportOptions, get_paper, write_report
    from fairdp.analysis._shared import check_level, check_rt
    from fairdp.study import stored_predictions

    if args.rt is not None:
        check_rt(args.rt, "--rt")
    args.rts = _rt_list(args.rts) if args.rts else None  # None: the study's sweep, else the default
    if not args.no_ci:
        check_level(args.ci, "--ci")
    args.output = str(output_dir(args.output, "-o"))  # a file:// URI as its path
    _check_report_outside_results(args.output, args.dirs)
    formats, style = _figure_options(args)
    for name in args.compare or ():
        get_paper(name)  # an unknown name is refused before anything is read or written
    df = _load_rows(args.dirs, args.pool)
    chosen = _chosen_selection("report", args, args.dirs, keys=("fairness", "rt", "by", "rts", "private"))
    search = chosen.search
    whole = _completeness(df, args.dirs, chosen)
    history, grid = _search_histories(args.dirs, args.compare_grid)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        df = _privately(df, chosen)
        options = ReportOptions(
            rt=chosen.values["rt"], fairness=chosen.values["fairness"], rts=chosen.values["rts"],
            by=tuple(chosen.values["by"]), ci=None if args.no_ci else args.ci, search_history=history, grid=grid,
            compare=tuple(args.compare or ()), completeness=whole, history=_curves(args.dirs, df),
            search_objectives=search.objectives if search else None,
            search_constraints=tuple(search.constraints) if search else (), selection=chosen.message,
            error_bars=args.error_bars, keep_constant=args.keep_constant, figure_formats=formats, figure_style=style,
            predictions=tuple(p for p in map(stored_predictions, args.dirs) if p), figures=not args.no_figures)
        paths = write_report(df, args.output, options)
    print(f"fairdp report: {chosen.message}", file=sys.stderr)
    if search is not None:
        print(f"fairdp report: Pareto fronts on the search's objectives, from the study: {search.describe()}",
              file=sys.stderr)
    for w in caught:
        print(f"fairdp report: warning: {w.message}", file=sys.stderr)
    if whole.is_partial:
        print(f"fairdp report: warning: {whole.text}", file=sys.stderr)
    for p in paths:
        print(p)
    return 0


def _figure_options(args):
    """``--figure-format`` and ``--figure-style`` checked before anything is read: the formats,
    and a style file or name, or rcParams from KEY=VALUE pairs."""
    from fairdp.analysis._shared import check_figure_formats, figure_style_context

    try:
        formats = check_figure_formats(getattr(args, "figure_format", None) or "png")
    except InputError as e:
        raise InputError(f"--figure-format: {str(e).split(': ', 1)[1]}") from None
    style = getattr(args, "figure_style", None)
    if style and all("=" in part for part in style.split(",")):
        style = {k.strip(): _yaml_value(v.strip(), "--figure-style") for k, v in (p.split("=", 1) for p in style.split(","))}
    try:
        figure_style_context(style)  # refuses an unknown style or rcParam now
    except InputError as e:
        raise InputError(f"--figure-style: {str(e).split(': ', 1)[1]}") from None
    return formats, style


def _yaml_value(text: str, flag: str):
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError:
        raise InputError(f"{flag}: cannot parse value {text!r}") from None


def _cmd_figure(args) -> int:
    """One figure of a report, with the study's selection, written as the output's suffix says."""
    from fairdp.analysis import ReportOptions, report_figures, save_figure
    from fairdp.analysis._shared import FIGURES, check_rt, figure_style_context

    if args.kind not in FIGURES:
        raise InputError(f"KIND: one of {', '.join(FIGURES)}, got {args.kind!r}")
    if not args.output.lower().endswith((".png", ".pdf", ".svg")):
        raise InputError(f"-o: a figure is written as .png, .pdf or .svg, got {args.output!r}")
    if args.rt is not None:
        check_rt(args.rt, "--rt")
    args.rts = _rt_list(args.rts) if args.rts else None
    _, style = _figure_options(args)
    df = _load_rows(args.dirs)
    chosen = _chosen_selection("figure", args, args.dirs, keys=("fairness", "rt", "by", "rts"))
    search = chosen.search
    with figure_style_context(style):
        options = ReportOptions(
            rt=chosen.values["rt"], fairness=chosen.values["fairness"], rts=chosen.values["rts"],
            by=tuple(chosen.values["by"]), error_bars=args.error_bars,
            history=_curves(args.dirs, df) if args.kind == "learning_curves" else None,
            search_objectives=search.objectives if search else None,
            search_constraints=tuple(search.constraints) if search else ())
        drawn = report_figures(df, options, only=[args.kind])
        fig = drawn[args.kind]
        if fig is None:
            raise InputError(f"KIND: these rows draw no {args.kind} figure (its columns or methods are not there)")
        path = save_figure(fig, args.output)
    print(f"fairdp figure: {chosen.message}", file=sys.stderr)
    print(path)
    return 0


def _cmd_dashboard(args) -> int:
    """Serve the dashboard of one results directory on 127.0.0.1 until Ctrl-C. The results are
    read here, and again when the page asks; nothing is written."""
    from pathlib import Path

    # the dashboard's data and server (pandas; matplotlib's staircase of the fronts) load only when it runs
    from fairdp.analysis._shared import HOST, DashboardServer, check_rt, prepare_dashboard
    from fairdp.study import read_hypervolume_histories

    if args.rt is not None and not math.isfinite(check_rt(args.rt, "--rt")):
        raise InputError(f"--rt: must be a finite number of accuracy points, got {args.rt!r}")
    args.rts = _rt_list(args.rts) if args.rts else None
    if args.rts and not all(math.isfinite(r) for r in args.rts):
        raise InputError("--rts: relaxation thresholds must be finite numbers")
    if not 0 <= args.port <= 65535:
        raise InputError(f"--port: a port number from 0 (any free port) to 65535, got {args.port}")
    results = args.results
    if "://" not in results and not Path(results).is_dir():
        raise InputError(f"RESULTS {results}: no such results directory")
    chosen = _chosen_selection("dashboard", args, [results], keys=("fairness", "rt", "by", "rts"))
    values = chosen.values

    def load():
        """The results read (again: the page's Reload) and prepared for the page."""
        try:
            df = _load_rows([results])
            history, searched = _curves([results], df), read_hypervolume_histories(results)
        except InputError as e:
            raise InputError(f"RESULTS {e}") from None
        return prepare_dashboard(
            df, fairness=values["fairness"], rt=values["rt"], by=list(values["by"]), rts=values["rts"],
            history=history, search_history=searched, title=results, selection=chosen.message)

    dashboard = load()
    try:
        server = DashboardServer(dashboard, args.port, reload=load)
    except OSError as e:
        raise InputError(f"--port {args.port}: cannot listen on {HOST}:{args.port} "
                         f"({e.strerror or e}); give another port, or 0 for any free one") from None
    print(f"fairdp dashboard: {chosen.message}", file=sys.stderr)
    print(f"fairdp dashboard: serving {results} read-only on this machine only; Ctrl-C stops it", file=sys.stderr)
    print(server.url, flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        print("fairdp dashboard: stopped", file=sys.stderr)
    finally:
        server.server_close()
    return 0


def _search_histories(dirs: list[str], grid_dirs: list[str] | None):
    """The hypervolume histories a search wrote beside ``dirs`` (None when there is none),
    and the rows of ``--compare-grid`` directories (None when not given)."""
    from fairdp.study import read_hypervolume_histories

    history = read_hypervolume_histories(*dirs)
    if not grid_dirs:
        return history, None
    if history is None:
        raise InputError(f"--compare-grid: no search hypervolume history (<DIR>.hypervolume-<method>-seed<s>.parquet) "
                         f"beside {', '.join(dirs)}; give a search's results directory as DIR")
    return history, _load_rows(grid_dirs)


def _print_results(location: str, fairness: str, rt: float, by=()) -> None:
    from fairdp.analysis import aggregate_seeds, format_table, select_by_rt, with_constant_picks
    from fairdp.study import read_results

    df = read_results(location)
    selected = select_by_rt(df, rt=rt, fairness=fairness, by=by)
    per = f" per {', '.join(by)}" if by else ""
    print(f"relaxation threshold {rt:g} (selection{per} by valid accuracy within {rt:g} points, then lowest "
          f"valid {fairness}); test metrics, mean ± std over seeds\n")
    agg = with_constant_picks(aggregate_seeds(selected, fairness=fairness, by=by), selected, by)
    print(format_table(agg, fmt="md", fairness=fairness, by=by))


def _print_table(header: tuple, rows: list[tuple]) -> None:
    cells = [tuple(str(c) for c in header)] + [tuple(str(c) for c in r) for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    for k, row in enumerate(cells):
        print("  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip())
        if k == 0:
            print("  ".join("-" * w for w in widths))


def _add_data_parser(sub) -> None:
    """``fairdp data list|fetch|describe``."""
    data = sub.add_parser("data", help="list, fetch and describe datasets")
    dsub = data.add_subparsers(dest="data_command", required=True, parser_class=_Parser)
    dsub.add_parser("list", help="registered datasets and their cache state").set_defaults(func=_cmd_data_list)
    fetch = dsub.add_parser("fetch", help="download and checksum a dataset's source files")
    fetch.add_argument("name")
    fetch.set_defaults(func=_cmd_data_fetch)
    describe = dsub.add_parser("describe", help="load datasets and print their summaries")
    describe.add_argument("names", nargs="+", metavar="NAME")
    describe.add_argument("--json", action="store_true", help="one JSON object (a list for several names)")
    describe.add_argument("-o", "--option", action="append", default=[], metavar="KEY=VALUE",
                          help="loader option, e.g. -o sensitive=race or -o path=DIR (repeatable)")
    describe.set_defaults(func=_cmd_data_describe)


def _add_audit_parser(sub) -> None:
    """``fairdp audit``: a mechanism's empirical eps."""
    aud = sub.add_parser("audit", help="empirical lower bound on a privacy mechanism's eps")
    aud.add_argument("--mechanism", required=True, choices=AUDIT_MECHANISMS,
                     help="laplace (FEDERATE), minmax (DPNR/CAPE as published), l2 (FEDERATE's code)")
    aud.add_argument("--eps", required=True, type=float, help="the mechanism's eps parameter")
    aud.add_argument("--dim", required=True, type=int, help="D, features per row")
    aud.add_argument("--samples", type=int, default=400_000,
                     help="outputs drawn per input, half to choose the event (default 400000)")
    aud.add_argument("--confidence", type=float, default=0.95,
                     help="probability that the bound holds (default 0.95)")
    aud.add_argument("--seed", type=int, default=0, help="seed of the mechanism's noise (default 0)")
    aud.add_argument("--json", action="store_true", help="one JSON object")
    aud.set_defaults(func=_cmd_audit)


def _add_audit_training_parser(sub) -> None:
    """``fairdp audit-training``: a canary audit of a DP-SGD or PF-LD config's training."""
    aut = sub.add_parser("audit-training", help="one-run canary audit of a DP-SGD, PF-LD or (input canaries) "
                         "DPSGD-Global-Adapt, DPSGD-F or DP-FERMI config's training (and of PF-LD's dual release): claimed eps vs an "
                         "empirical lower bound")
    aut.add_argument("--spec", metavar="STUDY.yaml",
                     help="audit a config of this study's dpsgd, pfld, dpsgd_global_adapt, dpsgd_f or dp_fermi grid, on its "
                          "data, its "
                          "modules (a module of your own included) and its training settings")
    aut.add_argument("--config", type=int, metavar="N", help="with --spec: the config's index in the grid (default 0)")
    aut.add_argument("--method", choices=AUDIT_TRAINING_METHODS,
                     help="the method (required without --spec; with it, needed only when the study has both)")
    aut.add_argument("--eps", type=float, help="the config's target eps (delta 1e-5); required without --spec")
    aut.add_argument("--clip", type=float, help="clip_primal, the per-row gradient clip (default 1)")
    aut.add_argument("--clip-dual", type=float, help="PF-LD's clip_dual (default 1)")
    aut.add_argument("--notion", choices=("dp", "eo", "ap"), help="PF-LD's fairness notion (default dp)")
    aut.add_argument("--dataset", help="a registered dataset (default synthetic)")
    aut.add_argument("-o", "--option", action="append", default=[], metavar="KEY=VALUE",
                     help="dataset loader option, e.g. -o rows=3000 (repeatable)")
    aut.add_argument("--rows", type=int, help="subsample the train split to this many rows (valid, test: a quarter)")
    aut.add_argument("--epochs", type=int, help="training epochs (default 5, or the study's)")
    aut.add_argument("--batch-size", type=int, help="minibatch size (default 100, or the study's)")
    aut.add_argument("--lr", type=float, help="learning rate (default: the study's, else the method's, 0.1)")
    aut.add_argument("--canaries", type=int, default=1000, help="m, canaries with random signs (default 1000)")
    aut.add_argument("--canary-kind", choices=AUDIT_CANARY_KINDS, default="gradient",
                     help="gradient: white-box Dirac gradient canaries on every layer, scored on every step "
                          "(default); input: black-box canary records, scored on the final model")
    aut.add_argument("--k-positive", type=int, help="highest scores guessed +1 (default canaries // 10)")
    aut.add_argument("--k-negative", type=int, help="lowest scores guessed -1 (default canaries // 10)")
    aut.add_argument("--canary-norm", type=float,
                     help="a gradient canary's norm in clipping bounds (default 10), or an input canary's one "
                          "non-zero feature (default 4)")
    aut.add_argument("--confidence", type=float, default=0.95, help="probability that the bound holds (default 0.95)")
    aut.add_argument("--seed", type=int, default=0, help="draws the canaries' signs and seeds the run (default 0)")
    aut.add_argument("--dual-samples", type=int, default=4000,
                     help="PF-LD: dual releases drawn per neighbouring dataset (default 4000)")
    aut.add_argument("--no-dual-audit", action="store_true", help="PF-LD: skip the audit of its dual release")
    aut.add_argument("--noise-scale", type=float, default=1.0,
                     help="planted bug, to see the audit catch it: scale the noise multipliers (e.g. 0.2)")
    aut.add_argument("--no-clipping", action="store_true",
                     help="planted bug: per-row clipping off, the noise kept at the clipping bound's scale")
    aut.add_argument("--first-layer-noise-only", action="store_true",
                     help="planted bug: each step's noise on the first layer's weight and bias only")
    aut.add_argument("--no-dual-noise", action="store_true",
                     help="planted bug (PF-LD): the dual sums and counts released without noise")
    aut.add_argument("--json", action="store_true", help="one JSON object")
    aut.set_defaults(func=_cmd_audit_training)


def _add_methods_parser(sub) -> None:
    """``fairdp methods``: every registered method, plugins included."""
    met = sub.add_parser("methods", help="every registered method (plugins too): its paper, grid keys, guarantee and "
                         "the roles that take a module of yours")
    met.add_argument("names", nargs="*", metavar="METHOD", help="only these methods (default: all)")
    met.add_argument("--plugin", action="append", default=[], metavar="FILE_OR_MODULE",
                     help="import a plugin first, as a study's plugins: does (repeatable)")
    met.add_argument("--dataset", default="adult", help="whose paper grid to show as each key's values (default adult)")
    met.add_argument("--json", action="store_true", help="one JSON list")
    met.set_defaults(func=_cmd_methods)


def _cmd_methods(args) -> int:
    """Every registered method (after ``--plugin``): name, paper, guarantee kind, grid keys
    with their ranges and the paper's values, sweepable training settings, user modules."""
    from fairdp.methods import get_method, load_plugins, method_names
    from fairdp.methods._shared import describe_method

    load_plugins(args.plugin, key="--plugin")
    names = args.names or method_names()
    unknown = [n for n in names if n not in method_names()]
    if unknown:
        raise InputError(f"METHOD: no registered method {unknown[0]!r} (registered: {', '.join(method_names())})")
    described = [describe_method(get_method(n), args.dataset) for n in names]
    if args.json:
        print(json.dumps(described, indent=2))
        return 0
    for i, d in enumerate(described):
        print(("\n" if i else "") + f"{d['name']}: {d['summary']}")
        print(f"  guarantee: {d['guarantee'] or 'not private'}")
        for key in d["grid_keys"]:
            values = ", ".join(f"{v:g}" if isinstance(v, float) else str(v) for v in key["paper_values"])
            print(f"  {key['name']}: {key['range']}; {key['doc']}"
                  + (f" (the paper's grid on {args.dataset}: {values})" if values else ""))
        if not d["grid_keys"]:
            print("  no grid keys")
        if d["settings"]:
            print(f"  a grid may also sweep: {', '.join(d['settings'])}")
        print(f"  a module of yours: {', '.join(d['user_modules']) if d['user_modules'] else 'none'}"
              + ("" if d["module"].startswith("fairdp.") else f"; from {d['module']}"))
    return 0


def _add_check_method_parser(sub) -> None:
    """``fairdp check-method``: the method contract on a plugin's methods."""
    chk = sub.add_parser("check-method", help="run fairdp's method contract on the methods a plugin registers")
    chk.add_argument("module", metavar="MODULE", help="a plugin: a .py file or an importable module name")
    chk.add_argument("-x", "--first-failure", action="store_true", help="stop at the first failing check")
    chk.set_defaults(func=_cmd_check_method)


def _add_check_model_parser(sub) -> None:
    """``fairdp check-model``: whether a module of the user's can be packed and clipped per sample."""
    chk = sub.add_parser("check-model", help="check that a model factory's module can be packed and clipped per "
                                             "sample, as a study's architecture.models would train it")
    chk.add_argument("factory", metavar="FACTORY", nargs="?",
                     help="module:function, file.py:function or a registered model name")
    chk.add_argument("--in", dest="in_features", type=int, metavar="N", help="input features")
    chk.add_argument("--out", dest="out_features", type=int, metavar="M", help="outputs")
    chk.add_argument("--spec", metavar="STUDY.yaml",
                     help="instead of FACTORY, --in and --out: every module of the user's the study trains, with "
                          "the sizes its data and architecture give each role and the keywords its grid sweeps")
    chk.add_argument("--role", choices=("encoder", "classifier", "adversary"),
                     help="with --spec: only the modules of this role")
    chk.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                     help="a keyword for the factory (a YAML value), repeatable")
    chk.set_defaults(func=_cmd_check_model)


def _study_options(*, results: str, seeds: str, dry_run: str) -> argparse.ArgumentParser:
    """The parent parser of the options ``run`` and ``search`` share (a study and how to train
    it): one definition of each, worded once; a command words only what means something else
    for it (where the results may be, what a seed is, what the plan lists)."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("study", metavar="STUDY.yaml")
    common.add_argument("--results", metavar="DIR", help=results)
    common.add_argument("--address", help="Ray cluster to use (host:port or auto); default RAY_ADDRESS, else an "
                                          "embedded Ray on 127.0.0.1")
    common.add_argument("--seeds", help=seeds)
    common.add_argument("--epochs", type=int, help="training epochs instead of the spec's")
    common.add_argument("--dry-run", action="store_true", help=dry_run)
    common.add_argument("--executor", metavar="NAME",
                        help="ray (default): packs as Ray Tune trials, embedded or on --address; local: packs one "
                             "after another in this process, without Ray (same store, same resume)")
    common.add_argument("--checkpoint-every", type=float, default=600.0, metavar="SECONDS",
                        help="a pack in training saves its state this often (default 600; 0: never), so that a "
                             "killed run resumes its packs from their last save; the numbers are the same")
    common.add_argument("--repair", action="store_true",
                        help="move corrupt or foreign result files, and copies of a pack file, aside (hidden "
                             ".corrupt-* names) instead of refusing to start; run then reruns the configs no other "
                             "file holds")
    return common


def _add_run_parser(sub) -> None:
    """``fairdp run``: every (method, config, seed) of a study."""
    common = _study_options(
        results="results location: a directory or a URI (file://, s3://, gs://); default results/<study name>",
        seeds="comma-separated seeds instead of the spec's, e.g. 0,1",
        dry_run="print the plan (configs, packs, slots) and exit: no training, no Ray, nothing written")
    run = sub.add_parser("run", parents=[common], help="run every (method, config, seed) of a study on Ray Tune")
    run.add_argument("--no-compact", dest="compact", action="store_false",
                     help="keep one file per pack: do not merge the pack files of the seeds the run finishes "
                          "(fairdp compact does it later)")
    run.set_defaults(func=_cmd_run)


def _add_search_parser(sub) -> None:
    """``fairdp search``: the spec's Optuna search."""
    common = _study_options(
        results="results directory, local or on a shared filesystem: it holds the Optuna journal "
                "(default results/<study name>)",
        seeds="comma-separated search seeds instead of the spec's, e.g. 0,1: one search (one Optuna study) per seed",
        dry_run="print the plan (trials, generations, slots) and exit: no training, no Ray, nothing written")
    srch = sub.add_parser("search", parents=[common],
                          help="Optuna multi-objective search (the spec's search: block) on Ray Tune")
    srch.add_argument("--trials", type=int, help="total trials of the search (default: search.trials)")
    srch.add_argument("--mode", choices=("packed", "per-config"),
                      help="packed: a sampler generation trains as packs (NSGA-II default); per-config: "
                      "one config at a time (TPE default)")
    srch.set_defaults(func=_cmd_search)


def _add_analyze_parser(sub) -> None:
    """``fairdp analyze``: the selection's table."""
    ana = sub.add_parser("analyze", help="relaxation-threshold selection, mean ± std over seeds, as a table")
    ana.add_argument("dirs", nargs="+", metavar="DIR", help="results directories or Parquet files of rows (several combine)")
    ana.add_argument("--rt", type=float, help="relaxation threshold in accuracy points (default: the study's "
                     "selection.rt stored with the results, else 1)")
    ana.add_argument("--by", type=_by_keys, metavar="KEY,...",
                     help="select and aggregate per value of these columns too, e.g. fairness_notion,eps ('': per "
                          "run only; default: the study's selection.by)")
    ana.add_argument("--fairness", choices=SELECTION_FAIRNESS,
                     help="selection and reported fairness metric (default: the study's selection.fairness, else "
                          "tpr_gap)")
    ana.add_argument("--format", choices=("md", "csv", "latex"), default="md")
    ana.add_argument("--selected", action="store_true",
                     help="print the config selected in each (dataset, method, seed) with its hyperparameters "
                     "instead of the aggregate table")
    ana.add_argument("--advise-width", type=float, default=1.0, metavar="POINTS",
                     help="seed advice: the seeds a t-interval of +- this many points needs, from the observed spread "
                          "(default 1)")
    ana.add_argument("--ci", type=float, metavar="LEVEL",
                     help="confidence intervals at LEVEL percent, e.g. 95: the t-interval of each mean over "
                     "seeds; with --selected, a bootstrap over each selected row's test examples")
    ana.add_argument("--draws", type=_draws, default=1000,
                     help="bootstrap resamples per row for --ci --selected (default 1000)")
    ana.add_argument("--pool", action="store_true",
                     help="rows of several studies (e.g. a grid and a search) selected together, one selection per "
                          "seed over all their configs; refused without it")
    _add_private_options(ana)
    ana.set_defaults(func=_cmd_analyze)


def _add_report_parser(sub) -> None:
    """``fairdp report``: tables, figures, Markdown and HTML."""
    rep = sub.add_parser("report", help="tables, figures and a Markdown/HTML report of results")
    rep.add_argument("dirs", nargs="+", metavar="DIR", help="results directories or Parquet files of rows (several combine)")
    rep.add_argument("-o", "--output", required=True, metavar="OUT", help="report directory")
    rep.add_argument("--rt", type=float, help="relaxation threshold of the main table (default: the study's "
                     "selection.rt, else 1)")
    rep.add_argument("--rts", help="RTs of the sweep, comma-separated (default: the study's selection.rts, else "
                     "0,0.5,1,2,3,5)")
    rep.add_argument("--fairness", choices=SELECTION_FAIRNESS,
                     help="selection and reported fairness metric; notion_gap: each notion's own violation "
                          "(default: the study's selection.fairness, else tpr_gap)")
    rep.add_argument("--by", type=_by_keys, metavar="KEY,...",
                     help="select and aggregate per value of these columns too, e.g. fairness_notion,eps ('': per "
                          "run only; default: the study's selection.by)")
    rep.add_argument("--ci", type=float, default=95.0, metavar="LEVEL",
                     help="confidence level of the intervals, percent (default 95)")
    rep.add_argument("--no-ci", action="store_true", help="no confidence intervals")
    rep.add_argument("--error-bars", choices=("t", "std", "bootstrap", "none"), default="std",
                     help="what the figures' error bars show over seeds: the t-interval of the mean (at --ci), "
                          "± 1 std (default: the spread the tables print), a percentile bootstrap of the mean, or "
                          "none; an interval over fewer than 3 seeds is warned about")
    rep.add_argument("--figure-format", metavar="FMT,...", default="png",
                     help="save each figure in these formats too: png, pdf, svg (default png; the report shows png)")
    _add_figure_options(rep)
    rep.add_argument("--no-figures", action="store_true",
                     help="tables only: every page without its figures (seconds less on a large store)")
    rep.add_argument("--keep-constant", action="store_true",
                     help="keep methods whose pick is a constant model (one class for nearly every row) in the "
                          "supported differences and the Pareto fronts (default: left out, and named)")
    rep.add_argument("--compare", action="append", metavar="PAPER_TABLE",
                     help="put a paper's published values and claims beside the study's: "
                          "federate-table3, pfld-adult, pfld-compas, dp-fermi-adult, dp-fermi-compas, "
                          "global-adapt-adult or global-adapt-compas (repeatable)")
    rep.add_argument("--pool", action="store_true",
                     help="rows of several studies selected together (refused without it); the report names them")
    rep.add_argument("--compare-grid", action="append", metavar="GRID_DIR",
                     help="a grid study's results: the search progress section sets each search's hypervolume "
                     "per generation against the grid front's (same dataset, method, seed, epochs); repeatable")
    _add_private_options(rep)
    rep.set_defaults(func=_cmd_report)


FIGURE_KINDS = ("rt_sweep", "fairness_accuracy_bins", "privacy_accuracy", "leakage_vs_eps", "violation_accuracy_eps",
                "pareto_fronts", "learning_curves", "hypervolume_history")
"""The keys of ``fairdp.analysis``'s report ``FIGURES``, spelled out so that building the parser
does not import matplotlib (tests check that the two agree)."""


def _add_figure_options(parser) -> None:
    parser.add_argument("--figure-style", metavar="STYLE",
                        help="a matplotlib style file (.mplstyle) or name, or rcParams as KEY=VALUE,... "
                             "(e.g. font.size=8,savefig.dpi=300)")


def _add_figure_parser(sub) -> None:
    """``fairdp figure``: one report figure."""
    fig = sub.add_parser("figure", help="draw one report figure with the study's selection, as png, pdf or svg")
    fig.add_argument("kind", metavar="KIND", help=f"one of {', '.join(FIGURE_KINDS)}")
    fig.add_argument("dirs", nargs="+", metavar="DIR", help="results directories (several combine)")
    fig.add_argument("-o", "--output", required=True, metavar="FILE", help="the figure file: .png, .pdf or .svg")
    fig.add_argument("--rt", type=float, help="relaxation threshold (default: the study's selection.rt, else 1)")
    fig.add_argument("--rts", help="RTs of the sweep, comma-separated (default: the study's selection.rts)")
    fig.add_argument("--fairness", choices=SELECTION_FAIRNESS, help="selection fairness metric (default: the study's)")
    fig.add_argument("--by", type=_by_keys, metavar="KEY,...", help="pick per value of these columns too")
    fig.add_argument("--error-bars", choices=("t", "std", "bootstrap", "none"), default="std",
                     help="what the error bars show over seeds (default std)")
    _add_figure_options(fig)
    fig.set_defaults(func=_cmd_figure)


def _add_dashboard_parser(sub) -> None:
    """``fairdp dashboard``: a live, read-only view of a study's results in the browser."""
    dash = sub.add_parser("dashboard", help="a results directory's Pareto fronts, RT picks, curves and search "
                          "progress as a page served read-only on 127.0.0.1")
    dash.add_argument("results", metavar="RESULTS", help="a results directory")
    dash.add_argument("--port", type=int, default=8050,
                      help="the port on 127.0.0.1 (default 8050; 0: any free port, printed)")
    dash.add_argument("--rt", type=float, help="the RT the slider starts at (default: the study's selection.rt, "
                      "else 1)")
    dash.add_argument("--rts", help="RTs the slider offers besides 0, 0.25, ..., 5, comma-separated (default: the "
                      "study's selection.rts)")
    dash.add_argument("--fairness", choices=SELECTION_FAIRNESS,
                      help="selection fairness metric, drawn at test against test accuracy (default: the study's)")
    dash.add_argument("--by", type=_by_keys, metavar="KEY,...", help="pick per value of these columns too (default: "
                      "the study's selection.by)")
    dash.set_defaults(func=_cmd_dashboard)


def _add_compare_parser(sub) -> None:
    """``fairdp compare``: two runs of one study."""
    cmp_ = sub.add_parser("compare", help="two runs of one study: bit-identical rows, RT picks, paired tests over seeds")
    cmp_.add_argument("a", metavar="DIR_A", help="results of one run")
    cmp_.add_argument("b", metavar="DIR_B", help="results of the other run (e.g. results/demo-reference)")
    cmp_.add_argument("--rt", type=float, help="relaxation threshold of the picks (default: the study's "
                      "selection.rt stored with the results, else 1)")
    cmp_.add_argument("--fairness", choices=SELECTION_FAIRNESS,
                      help="selection and compared fairness metric (default: the study's selection.fairness, else "
                           "tpr_gap)")
    cmp_.add_argument("--by", type=_by_keys, metavar="KEY,...",
                      help="pick per value of these columns too ('': per run only; default: the study's selection.by)")
    cmp_.add_argument("--resolution", type=float, default=1.0, metavar="POINTS",
                      help="'within seed noise' only where the paired test detects a difference this large (alpha "
                           "0.05, 80%% power); else 'not resolved with N seeds' (default 1 point)")
    cmp_.add_argument("--format", choices=("md", "csv"), default="md",
                      help="md: a summary line and both tables; csv: the paired tests")
    cmp_.add_argument("--all-picks", action="store_true",
                      help=f"list every RT pick (default: every pick up to {PICKS_LISTED}, else the picks that differ)")
    cmp_.set_defaults(func=_cmd_compare)


def _add_compact_parser(sub) -> None:
    """``fairdp compact``: a finished seed's pack files merged into one."""
    cmp_ = sub.add_parser("compact", help="merge each finished seed's pack files into one file (reading many small "
                                          "files is what a large store's analysis costs); safe to kill and rerun")
    cmp_.add_argument("results", metavar="DIR", help="a results directory or URI")
    cmp_.add_argument("--seeds", metavar="S,...", help="only these seeds (default: every finished one)")
    cmp_.set_defaults(func=_cmd_compact)


def _cmd_compact(args) -> int:
    from fairdp.study import compact

    done = compact(args.results, _seed_list(args.seeds))
    print(f"fairdp compact {args.results}: {done.describe()}", file=sys.stderr)
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="fairdp", description="Hyperparameter studies for fair and private learning.")
    p.add_argument("--version", action="version", version=f"fairdp {__version__}")
    sub = p.add_subparsers(dest="command", required=True, parser_class=_Parser)
    for add in (_add_data_parser, _add_methods_parser, _add_audit_parser, _add_audit_training_parser,
                _add_check_method_parser, _add_check_model_parser,
                _add_run_parser, _add_search_parser, _add_analyze_parser, _add_report_parser, _add_figure_parser,
                _add_dashboard_parser, _add_compare_parser, _add_compact_parser):
        add(sub)
    return p


def _cmd_check_method(args) -> int:
    """Run the method contract (``fairdp.testing.method_contract``) on the methods a plugin
    registers, with pytest, one line per check: 0 if every check passes, 1 if one fails."""
    import importlib.util
    import os
    import subprocess

    from fairdp.methods import load_plugins, method_names

    if importlib.util.find_spec("pytest") is None:
        raise InputError("check-method: needs pytest (pip install pytest)")
    before = set(method_names())
    plugin = load_plugins([args.module], key="MODULE")[0]  # a module that does not import: exit 2 here
    added = [n for n in method_names() if n not in before]
    if not added:
        raise InputError(f"MODULE {args.module}: registers no method (call fairdp.methods.register_method in it)")
    print(f"fairdp check-method: checking {', '.join(added)} from {plugin}", file=sys.stderr, flush=True)
    env = {**os.environ, "FAIRDP_CHECK_PLUGINS": plugin, "FAIRDP_CHECK_ONLY_PLUGINS": "1"}
    done = subprocess.run([sys.executable, "-m", "pytest", "--pyargs", "fairdp.testing.method_contract", "-v",
                           "--no-header", "-p", "no:cacheprovider", *(["-x"] if args.first_failure else [])],
                          env=env)
    return 0 if done.returncode == 0 else 1


MAX_CHECK_FEATURES = 2**24
"""The largest --in or --out check-model takes: 16.8M features (a 4096 x 4096 image's pixels);
its checks hold a few rows of them in float64."""


def _cmd_check_model(args) -> int:
    """One line per check of ``fairdp.testing.model_check``: 0 if every check passes, 1 if
    one fails, 2 for a factory that cannot be found or a bad option. With ``--spec``, the
    checks of every module the study trains, each under a line naming it."""
    import yaml

    from fairdp.engine import ModelRef
    from fairdp.testing.model_check import run_model_checks

    def report(name: str, why: str | None, skipped: bool) -> None:
        print(f"{'SKIP' if skipped else 'FAIL' if why else 'PASS'}  {name}" + (f": {why}" if why else ""))

    if args.spec is not None:
        if args.factory is not None or args.in_features is not None or args.out_features is not None or args.set:
            raise InputError("--spec: takes the factories, sizes and keywords from the study; give no FACTORY, "
                             "--in, --out or --set with it")
        return _check_study_models(args.spec, args.role, report)
    if args.role is not None:
        raise InputError("--role: only with --spec")
    for flag, value in (("FACTORY", args.factory), ("--in", args.in_features), ("--out", args.out_features)):
        if value is None:
            raise InputError(f"{flag}: required (or give --spec STUDY.yaml)")
    kwargs = {"factory": args.factory}
    for item in args.set:
        key, sep, value = item.partition("=")
        if not sep or not key.isidentifier():
            raise InputError(f"--set {item!r}: expected KEY=VALUE with KEY a Python name")
        try:
            kwargs[key] = yaml.safe_load(value)
        except yaml.YAMLError as e:
            raise InputError(f"--set {key}: cannot parse value {value!r} ({str(e).splitlines()[0]})") from None
    for flag, value in (("--in", args.in_features), ("--out", args.out_features)):
        if not 1 <= value <= MAX_CHECK_FEATURES:
            raise InputError(f"{flag}: must be a number of features from 1 to {MAX_CHECK_FEATURES:,}, got {value}")
    ref = ModelRef.parse(kwargs, "FACTORY", base_dir=".")
    print(f"fairdp check-model: {ref.describe()} for {args.in_features} inputs and {args.out_features} outputs",
          file=sys.stderr, flush=True)
    return 0 if run_model_checks(ref, args.in_features, args.out_features, report) else 1


def _check_study_models(path: str, role: str | None, report) -> int:
    """``check-model --spec``: each module of the user's that the study at ``path`` trains
    (``study_modules``; of ``role`` only when given), its checks under a line naming it."""
    from fairdp.study import load_spec
    from fairdp.study._shared import load_study_data, study_modules
    from fairdp.testing.model_check import run_model_checks

    spec = load_spec(path)
    data = load_study_data(spec.dataset, spec.dataset_options)
    modules = [m for m in study_modules(spec, data) if role is None or m[0] == role]
    if not modules:
        raise InputError(f"--spec {path}: the study trains no module of the user's"
                         + (f" as its {role}" if role else "") + " (architecture.models)")
    passed = True
    for i, (name, ref, d_in, d_out) in enumerate(modules):
        print(("\n" if i else "") + f"{name}: {ref.describe()} for {d_in} inputs and {d_out} outputs")
        passed = run_model_checks(ref, d_in, d_out, report) and passed
    return 0 if passed else 1


@contextlib.contextmanager
def _log_to_stderr():
    """For the command: the library's messages (records of the ``fairdp`` logger, info and
    above) as plain lines on stderr, beside the command's own, and nowhere else; the logger is
    as it was afterwards (a caller of ``main`` in its own process keeps its logging)."""
    log = logging.getLogger("fairdp")
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(message)s"))
    level, propagate = log.level, log.propagate
    log.addHandler(handler)
    log.setLevel(logging.INFO)
    log.propagate = False
    try:
        yield
    finally:
        log.removeHandler(handler)
        log.setLevel(level)
        log.propagate = propagate


_READS_TABLES = ("analyze", "compare", "report", "figure")
"""The commands that analyse a whole results table in this process (``fairdp._malloc``)."""


def main(argv: list[str] | None = None) -> int:
    try:
        with _log_to_stderr():
            args = build_parser().parse_args(argv)
            if args.command in _READS_TABLES:  # column-sized temporaries by the thousand
                reuse_freed_memory()
            return args.func(args)
    except InputError as e:
        print(f"fairdp: error: {' '.join(str(e).split())}", file=sys.stderr)
        return EXIT_INPUT
    except RunAborted as e:
        print(f"fairdp: error: {' '.join(str(e).split())}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("fairdp: interrupted", file=sys.stderr)
        return 130
