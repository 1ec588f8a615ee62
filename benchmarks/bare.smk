# A bare Snakefile of the real workflow's shape, for benchmarks/dryrun_scale.py --compare bare: the
# same rules, wildcards and constraints, inputs (`all` asks for what the workflow's `all` asks for,
# each run's recipe, final.pt, best.json and results.json), outputs (update() where the workflow has
# them), logs, benchmarks, conda, threads, resources, params and shell commands of the same length,
# the same functions where the workflow has input or params functions, and no ebd2n at all: the run
# ids are read from config["runs"], every function is a one-line lambda, the one base is `base`. What Snakemake alone
# costs to plan a campaign of that many runs.

D = "results/bare"
RUNS = config["runs"]
PY = "/usr/bin/python3"
TRAINER = f"PYTHONPATH={D}/frozen/src {PY} -m ebd2n"
CONDA_ENV = "environment.yml"
RESOURCES = {"gpu": 1, "mem_mb": 16000, "runtime": 240, "cpus_per_task": 8}
RUN_DIR = f"{D}/runs/{{wildcards.run}}"


wildcard_constraints:
    run=r"[^/]+",
    epoch=r"[0-9]+",
    base=r"[^/]+",


rule all:
    input:
        f"{D}/report/index.html",
        f"{D}/audit-runs.json",
        f"{D}/runs.csv",
        f"{D}/campaign.json",
        "results/caches/bare",
        f"{D}/frozen/SOURCE_HASH",
        f"{D}/frozen/recipes/base.yaml",
        f"{D}/frozen/plans/base.json",
        expand(f"{D}/runs/{{run}}/{{name}}", run=RUNS, name=["recipe.yaml", "final.pt", "best.json", "results.json"]),
    log:
        f"{D}/logs/audit.log",
    conda:
        CONDA_ENV
    params:
        campaign_dir=D,
    shell:
        f"{PY} -m ebd2n audit {{params.campaign_dir}} > {{log}} 2>&1"


rule prepare_cache:
    output:
        update(directory("results/caches/bare")),
    log:
        "results/logs/caches/bare.log",
    benchmark:
        "results/benchmarks/caches/bare.tsv"
    conda:
        CONDA_ENV
    threads: 8
    resources:
        **RESOURCES,
    params:
        campaign="config/campaigns/bare.yaml",
    shell:
        f"{PY} -m ebd2n campaign prepare {{params.campaign:q}} > {{log}} 2>&1"


rule freeze_trainer:
    output:
        update(f"{D}/frozen/SOURCE_HASH"),
        update(f"{D}/frozen/freeze.json"),
    log:
        f"{D}/logs/frozen/SOURCE_HASH.log",
    conda:
        CONDA_ENV
    params:
        campaign="config/campaigns/bare.yaml",
    shell:
        f"{PY} -m ebd2n freeze {{params.campaign:q}} > {{log}} 2>&1"


rule freeze_recipe:
    output:
        update(f"{D}/frozen/recipes/{{base}}.yaml"),
    log:
        f"{D}/logs/frozen/recipes/{{base}}.log",
    conda:
        CONDA_ENV
    params:
        campaign="config/campaigns/bare.yaml",
    shell:
        f"{PY} -m ebd2n freeze {{params.campaign:q}} --base {{wildcards.base}} > {{log}} 2>&1"


rule plan_slices:
    input:
        recipe=f"{D}/frozen/recipes/{{base}}.yaml",
        trainer=f"{D}/frozen/SOURCE_HASH",
        parent=lambda w: [],
    output:
        update(f"{D}/frozen/plans/{{base}}.json"),
    log:
        f"{D}/logs/frozen/plans/{{base}}.log",
    conda:
        CONDA_ENV
    params:
        epochs_per_slice=lambda w: 40,
        expect=lambda w: "40",
        parent=lambda w: "",
    shell:
        TRAINER + " plan {input.recipe} --epochs-per-slice {params.epochs_per_slice} --expect {params.expect}"
        " {params.parent} --output {output} > {log} 2>&1"


rule resolve_recipe:
    input:
        base=lambda w: f"{D}/frozen/recipes/base.yaml",
        trainer=f"{D}/frozen/SOURCE_HASH",
    output:
        update(f"{D}/runs/{{run}}/recipe.yaml"),
    log:
        f"{D}/logs/runs/{{run}}/recipe.log",
    conda:
        CONDA_ENV
    shell:
        TRAINER + " resolve " + RUN_DIR + " > {log} 2>&1"


rule train_final:
    input:
        recipe=ancient(f"{D}/runs/{{run}}/recipe.yaml"),
        cache=ancient("results/caches/bare"),
        plan=lambda w: ancient(f"{D}/frozen/plans/base.json"),
        previous=lambda w: [],
    output:
        final=update(f"{D}/runs/{{run}}/final.pt"),
        best=update(f"{D}/runs/{{run}}/best.json"),
    log:
        f"{D}/logs/runs/{{run}}/final.log",
    benchmark:
        f"{D}/benchmarks/runs/{{run}}/final.tsv"
    conda:
        CONDA_ENV
    threads: 8
    resources:
        **RESOURCES,
    params:
        launcher=lambda w: "-m ebd2n.launch --gpus 1 --processes 1 --nodes 1",
        until="",
        branch="",
    shell:
        f"PYTHONPATH={D}/frozen/src {PY} {{params.launcher}}"
        " train --config {input.recipe} {params.until} --plan {input.plan} {params.branch} --wait --quiet"
        " > {log} 2>&1"


rule validate_run:
    input:
        f"{D}/runs/{{run}}/final.pt",
    output:
        update(f"{D}/runs/{{run}}/results.json"),
    log:
        f"{D}/logs/runs/{{run}}/results.log",
    benchmark:
        f"{D}/benchmarks/runs/{{run}}/results.tsv"
    conda:
        CONDA_ENV
    threads: 8
    resources:
        **RESOURCES,
    params:
        launcher=lambda w: "-m ebd2n.launch --gpus 1",
    shell:
        f"PYTHONPATH={D}/frozen/src {PY} {{params.launcher}} validate " + RUN_DIR + " --wait > {log} 2>&1"


rule collect_runs:
    input:
        lambda w: [f"{D}/runs/{run}/results.json" for run in RUNS],
    output:
        update(f"{D}/runs.csv"),
        update(f"{D}/campaign.json"),
    log:
        f"{D}/logs/runs.log",
    conda:
        CONDA_ENV
    params:
        campaign="config/campaigns/bare.yaml",
        max_jobs=40,
    shell:
        f"{PY} -m ebd2n collect {{params.campaign:q}} --max-jobs {{params.max_jobs}} > {{log}} 2>&1"


rule audit_runs:
    input:
        f"{D}/runs.csv",
        f"{D}/campaign.json",
    output:
        update(f"{D}/audit-runs.json"),
    log:
        f"{D}/logs/audit-runs.log",
    conda:
        CONDA_ENV
    shell:
        f"{PY} -m ebd2n audit {D} --stage runs > {{log}} 2>&1"


rule report_campaign:
    input:
        f"{D}/audit-runs.json",
    output:
        update(f"{D}/report/index.html"),
    log:
        f"{D}/logs/report/index.log",
    conda:
        CONDA_ENV
    shell:
        f"{PY} -m ebd2n report {D} > {{log}} 2>&1"
