# A bare Snakefile of the real workflow's shape, for benchmarks/dryrun_scale.py --bare: the same
# rules, wildcards, outputs (update() where the workflow has them), logs, benchmarks, resources,
# threads and job count per run, and no ebd2n at all (the run ids are read from config["runs"]).
# What Snakemake alone costs to plan a campaign of that many runs.

D = "results/bare"
RUNS = config["runs"]
RESOURCES = {"gpu": 1, "mem_mb": 16000, "runtime": 240, "cpus_per_task": 8}


rule all:
    input:
        f"{D}/report/index.html",
    shell:
        "true"


rule prepare_cache:
    output:
        update("results/caches/bare/manifest.json"),
    log:
        f"{D}/logs/cache.log",
    shell:
        "true"


rule freeze_trainer:
    output:
        update(f"{D}/frozen/SOURCE_HASH"),
    log:
        f"{D}/logs/frozen/SOURCE_HASH.log",
    shell:
        "true"


rule freeze_recipe:
    input:
        f"{D}/frozen/SOURCE_HASH",
    output:
        update(f"{D}/frozen/recipes/{{base}}.yaml"),
    log:
        f"{D}/logs/frozen/recipes/{{base}}.log",
    shell:
        "true"


rule plan_slices:
    input:
        recipe=f"{D}/frozen/recipes/{{base}}.yaml",
        trainer=f"{D}/frozen/SOURCE_HASH",
    output:
        update(f"{D}/frozen/plans/{{base}}.json"),
    log:
        f"{D}/logs/frozen/plans/{{base}}.log",
    shell:
        "true"


rule resolve_recipe:
    input:
        base=lambda w: f"{D}/frozen/recipes/{w.run.split('-')[0]}.yaml",
        trainer=f"{D}/frozen/SOURCE_HASH",
    output:
        update(f"{D}/runs/{{run}}/recipe.yaml"),
    log:
        f"{D}/logs/runs/{{run}}/recipe.log",
    shell:
        "true"


rule train_final:
    input:
        recipe=ancient(f"{D}/runs/{{run}}/recipe.yaml"),
        cache=ancient("results/caches/bare/manifest.json"),
        plan=lambda w: f"{D}/frozen/plans/{w.run.split('-')[0]}.json",
    output:
        update(f"{D}/runs/{{run}}/final.pt"),
    log:
        f"{D}/logs/runs/{{run}}/final.log",
    benchmark:
        f"{D}/benchmarks/runs/{{run}}/final.tsv"
    threads: 8
    resources:
        **RESOURCES,
    shell:
        "true"


rule validate_run:
    input:
        f"{D}/runs/{{run}}/final.pt",
    output:
        update(f"{D}/runs/{{run}}/results.json"),
    log:
        f"{D}/logs/runs/{{run}}/results.log",
    benchmark:
        f"{D}/benchmarks/runs/{{run}}/results.tsv"
    threads: 8
    resources:
        **RESOURCES,
    shell:
        "true"


rule collect_runs:
    input:
        expand(f"{D}/runs/{{run}}/results.json", run=RUNS),
    output:
        update(f"{D}/runs.csv"),
        update(f"{D}/campaign.json"),
    log:
        f"{D}/logs/runs.log",
    shell:
        "true"


rule audit_runs:
    input:
        f"{D}/runs.csv",
        f"{D}/campaign.json",
    output:
        update(f"{D}/audit-runs.json"),
    log:
        f"{D}/logs/audit-runs.log",
    shell:
        "true"


rule report_campaign:
    input:
        f"{D}/audit-runs.json",
    output:
        update(f"{D}/report/index.html"),
    log:
        f"{D}/logs/report/index.log",
    shell:
        "true"
