# Freeze the trainer and base recipes once, resolve each run's recipe, train it slice by slice.
# The frozen files have no inputs, so they are never rewritten; every job after them runs the
# frozen trainer, passed by path. Slice checkpoints are temp(): gone once the next slice is done.


rule freeze_trainer:
    output:
        "results/{campaign}/frozen/SOURCE_HASH",
        "results/{campaign}/frozen/freeze.json",
    log:
        "results/{campaign}/logs/frozen/SOURCE_HASH.log",
    shell:
        "{EBD2N} freeze {CAMPAIGN_FILE:q} > {log} 2>&1"


rule freeze_recipe:
    output:
        "results/{campaign}/frozen/recipes/{base}.yaml",
    log:
        "results/{campaign}/logs/frozen/recipes/{base}.log",
    shell:
        "{EBD2N} freeze {CAMPAIGN_FILE:q} --base {wildcards.base} > {log} 2>&1"


rule resolve_recipe:
    input:
        base=get_frozen_base,
        trainer="results/{campaign}/frozen/SOURCE_HASH",
    output:
        f"{RUN}/recipe.yaml",
    log:
        "results/{campaign}/logs/runs/{run}/recipe.log",
    shell:
        TRAINER + " resolve " + RUN_DIR + " > {log} 2>&1"


rule train_slice:
    input:
        # ancient: the trainer rewrites recipe.yaml (same content) at every slice
        recipe=ancient(f"{RUN}/recipe.yaml"),
        cache=ancient(str(CACHE)),
        resume=get_resume_checkpoint,
    output:
        temp(f"{RUN}/checkpoints/epoch-{{epoch}}.pt"),
    log:
        "results/{campaign}/logs/runs/{run}/checkpoints/epoch-{epoch}.log",
    benchmark:
        "results/{campaign}/benchmarks/runs/{run}/checkpoints/epoch-{epoch}.tsv"
    params:
        resume=get_resume_arg,
        launcher=get_launcher,
    threads: RUN_THREADS
    resources:
        **RUN_RESOURCES,
    shell:
        LAUNCHED_TRAINER + " train --config {input.recipe} {params.resume} --until-epoch {wildcards.epoch} --quiet > {log} 2>&1"


rule train_final:
    input:
        recipe=ancient(f"{RUN}/recipe.yaml"),
        cache=ancient(str(CACHE)),
        resume=get_resume_checkpoint,
    output:
        final=f"{RUN}/final.pt",
        best=f"{RUN}/best.json",
        # every slice appends to it; update(): not deleted before the last slice runs
        metrics=update(f"{RUN}/metrics.jsonl"),
    log:
        "results/{campaign}/logs/runs/{run}/final.log",
    benchmark:
        "results/{campaign}/benchmarks/runs/{run}/final.tsv"
    params:
        resume=get_resume_arg,
        launcher=get_launcher,
    threads: RUN_THREADS
    resources:
        **RUN_RESOURCES,
    shell:
        LAUNCHED_TRAINER + " train --config {input.recipe} {params.resume} --quiet > {log} 2>&1"
