# Freeze the trainer and base recipes once, resolve each run's recipe, train it slice by slice.
# The frozen files have no inputs, so they are never rewritten; every job after them runs the
# frozen trainer, passed by path. The trainer owns checkpoint lifetime (see slice_output()).


rule freeze_trainer:
    output:
        str(C.source_hash),
        str(C.freeze_record),
    log:
        log_of(C.source_hash),
    shell:
        "{EBD2N} freeze {CAMPAIGN_FILE:q} > {log} 2>&1"


rule freeze_recipe:
    output:
        str(C.base_recipe("{base}")),
    log:
        log_of(C.base_recipe("{base}")),
    shell:
        "{EBD2N} freeze {CAMPAIGN_FILE:q} --base {wildcards.base} > {log} 2>&1"


# The slice chain of a base recipe's runs, written by the frozen trainer (the code the jobs run).
# The workflow planned the same chain already (common.smk: PLANS); the trainer refuses to write a
# different one, so no job runs under a plan the frozen trainer does not share.
rule plan_slices:
    input:
        recipe=str(C.base_recipe("{base}")),
        trainer=str(C.source_hash),
    output:
        str(C.slice_plan("{base}")),
    log:
        log_of(C.slice_plan("{base}")),
    params:
        epochs_per_slice=lambda wildcards: CAMPAIGN.slice_epochs(wildcards.base),
        expect=get_expected_ends,
    shell:
        TRAINER + " plan {input.recipe} --epochs-per-slice {params.epochs_per_slice} --expect {params.expect}"
        " --output {output} > {log} 2>&1"


rule resolve_recipe:
    input:
        base=get_frozen_base,
        trainer=str(C.source_hash),
    output:
        str(R.recipe),
    log:
        log_of(R.recipe),
    shell:
        TRAINER + " resolve " + RUN_DIR + " > {log} 2>&1"


rule train_slice:
    input:
        # ancient: both are checked by content instead (every checkpoint records the recipe and
        # cache identities; the trainer refuses a mismatch): a newer time alone never retrains a run
        recipe=ancient(str(R.recipe)),
        cache=ancient(str(CACHE)),
        # the frozen trainer's confirmation of the slice chain (written once; its time never retrains)
        plan=lambda wildcards: ancient(get_plan_file(wildcards)),
        resume=get_resume_input,
    output:
        slice_output(),
    log:
        log_of(R.checkpoint("{epoch}")),
    benchmark:
        benchmark_of(R.checkpoint("{epoch}"))
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
        recipe=ancient(str(R.recipe)),
        cache=ancient(str(CACHE)),
        # the frozen trainer's confirmation of the slice chain (written once; its time never retrains)
        plan=lambda wildcards: ancient(get_plan_file(wildcards)),
        resume=get_resume_input,
    # metrics.jsonl is no output: every slice appends to it, and the trainer cuts it back to the
    # checkpoint it resumes from. Snakemake deletes a failed job's outputs, and a cluster
    # controller cannot restore an update() output (its backup is made only where a job runs
    # locally): a cancelled or timed-out last slice would lose every earlier slice's records.
    output:
        final=str(R.final),
        best=str(R.best),
    log:
        log_of(R.final),
    benchmark:
        benchmark_of(R.final)
    params:
        resume=get_resume_arg,
        launcher=get_launcher,
    threads: RUN_THREADS
    resources:
        **RUN_RESOURCES,
    shell:
        LAUNCHED_TRAINER + " train --config {input.recipe} {params.resume} --quiet > {log} 2>&1"
