# Freeze the trainer and base recipes once, resolve each run's recipe, train it slice by slice.
# The frozen files have no inputs and are update() outputs of jobs that leave them as they are, so
# they are never rewritten; every job after them runs the frozen trainer, passed by path. Every job
# can run again (a twin controller's too): a training job resumes from the newest valid checkpoint in
# its run directory and does nothing once its epoch is reached, and the others write the same bytes
# atomically; outputs are update(), so Snakemake keeps them while a job runs again.


rule freeze_trainer:
    output:
        update(str(C.source_hash)),
        update(str(C.freeze_record)),
    log:
        log_of(C.source_hash),
    conda:
        CONDA_ENV
    params:
        campaign=CAMPAIGN_FILE,
    shell:
        JOB_START + EBD2N + " freeze {params.campaign:q} >> {log} 2>&1"


rule freeze_recipe:
    output:
        update(str(C.base_recipe("{base}"))),
    log:
        log_of(C.base_recipe("{base}")),
    conda:
        CONDA_ENV
    params:
        campaign=CAMPAIGN_FILE,
    shell:
        JOB_START + EBD2N + " freeze {params.campaign:q} --base {wildcards.base} >> {log} 2>&1"


# The slice chain of a base recipe's runs, written by the frozen trainer (the code the jobs run).
# The workflow planned the same chain (ebd2n.campaign.plans); the trainer refuses to write a
# different one, so no job runs under a plan the frozen trainer does not share.
rule plan_slices:
    input:
        recipe=str(C.base_recipe("{base}")),
        trainer=str(C.source_hash),
        parent=get_plan_parent,
    output:
        update(str(C.slice_plan("{base}"))),
    log:
        log_of(C.slice_plan("{base}")),
    conda:
        CONDA_ENV
    params:
        epochs_per_slice=get_slice_epochs,
        expect=get_expected_ends,
        parent=get_plan_parent_option,
    shell:
        JOB_START
        + TRAINER
        + " plan {input.recipe} --epochs-per-slice {params.epochs_per_slice} --expect {params.expect}"
        " {params.parent} --output {output} >> {log} 2>&1"


rule resolve_recipe:
    input:
        base=get_frozen_base,
        trainer=str(C.source_hash),
    output:
        update(str(R.recipe)),
    log:
        log_of(R.recipe),
    conda:
        CONDA_ENV
    params:
        settings=get_resolve_settings,
    shell:
        JOB_START + TRAINER + " resolve " + RUN_DIR + " {params.settings} >> {log} 2>&1"


# Successive halving (campaign `search`, ebd2n.campaign.search): after each rung the bracket's runs
# are ranked by their subset loss there; the decision is a checkpoint, so Snakemake plans the
# bracket's next slices (of the points that train on) as soon as it is made, other brackets aside.
# Its output is update(): run again (after a kill), the job finds what it decided and keeps it.
checkpoint decide_rung:
    input:
        get_rung_slices,
    output:
        update(str(C.rung_decision("{bracket}", "{epoch}", "{digest}"))),
    log:
        log_of(C.rung_decision("{bracket}", "{epoch}", "{digest}")),
    conda:
        CONDA_ENV
    params:
        campaign=CAMPAIGN_FILE,
    shell:
        JOB_START + EBD2N + " decide {params.campaign:q} --bracket {wildcards.bracket} --epoch {wildcards.epoch}"
        " --digest {wildcards.digest} >> {log} 2>&1"


# Every input is ancient(): checked by content instead (every checkpoint records the recipe and
# cache identities, the trainer refuses a mismatch; it resumes from what the run directory holds),
# so a newer time (a copy, a touch) never retrains a run. Under execution.pack the synchronous runs
# train in packs instead (below).
rule train_slice:
    input:
        recipe=ancient(str(R.recipe)),
        cache=ancient(str(CACHE)),
        plan=get_plan_file,
        previous=get_previous_slice,
    output:
        update(str(R.slice_record("{epoch}"))),
    log:
        log_of(R.slice_record("{epoch}")),
    benchmark:
        benchmark_of(R.slice_record("{epoch}"))
    wildcard_constraints:
        **PLAN.solo_runs(),
    conda:
        CONDA_ENV
    threads: RUN_THREADS
    resources:
        **RUN_RESOURCES,
    params:
        launcher=get_launcher,
        until="--until-epoch {epoch}",
        branch=get_branch,
    shell:
        JOB_START
        + LAUNCHED_TRAINER
        + " train --config {input.recipe} {params.until} --plan {input.plan} {params.branch} --wait --quiet"
        " >> {log} 2>&1"


# The last slice: the same job to the end of the budget. metrics.jsonl is no output: every slice
# appends to it, and the trainer cuts it back to the checkpoint it resumes from. run.json, written
# last, is the run's completion (ebd2n.train.records.RunRecord.finished): validation waits for it.
use rule train_slice as train_final with:
    output:
        final=update(str(R.final)),
        best=update(str(R.best)),
        record=update(str(R.record)),
    log:
        log_of(R.final),
    benchmark:
        benchmark_of(R.final)
    wildcard_constraints:
        **PLAN.solo_runs(),
    params:
        launcher=get_launcher,
        until="",
        branch="",


# Packed trials (campaign `execution.pack`, ebd2n.campaign.packs): one job trains the slice of up to
# K synchronous runs of a base recipe as one packed model, each into its own run directory; its
# record is named by its members. Each member's slice record (final.pt and best.json for the last)
# is then the output of a rule that runs nothing: the pack job wrote it, and Snakemake checks it is
# there. (A rule that runs a command would have Snakemake copy final.pt aside before it, a Python
# run: block would parse this workflow again, once per member.)
if PLAN.packing:

    rule train_pack:
        input:
            unpack(get_pack_inputs),
            cache=ancient(str(CACHE)),
            plan=ancient(str(C.slice_plan("{base}"))),
        output:
            update(str(C.pack_record("{base}", "{epoch}", "{digest}"))),
        log:
            log_of(C.pack_record("{base}", "{epoch}", "{digest}")),
        benchmark:
            benchmark_of(C.pack_record("{base}", "{epoch}", "{digest}"))
        conda:
            CONDA_ENV
        threads: PACK_THREADS
        resources:
            **PACK_RESOURCES,
        params:
            launcher=get_pack_launcher,
            runs=get_pack_run_dirs,
            header=get_pack_log_header,
        shell:
            JOB_START
            + "echo {params.header:q} >> {log}; "
            + LAUNCHED_TRAINER
            + " train-pack {params.runs} --until-epoch {wildcards.epoch} --plan {input.plan} --record {output}"
            " --wait >> {log} 2>&1"

    rule pack_member:
        input:
            get_member_pack,
        output:
            update(str(R.slice_record("{epoch}"))),
        wildcard_constraints:
            **PLAN.packed_runs(),

    rule pack_member_final:
        input:
            get_member_pack,
        output:
            final=update(str(R.final)),
            best=update(str(R.best)),
            record=update(str(R.record)),
        wildcard_constraints:
            **PLAN.packed_runs(),
