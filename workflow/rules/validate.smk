# Full validation of every run's final checkpoint, then one table over the campaign's runs.
# results.json is update(): Snakemake keeps it while the job runs, so validating an unchanged
# checkpoint again (a touched or copied final.pt) rewrites the same bytes instead of new ones.


rule validate_run:
    input:
        str(R.final),
    output:
        update(str(R.results)),
    log:
        log_of(R.results),
    benchmark:
        benchmark_of(R.results)
    conda:
        CONDA_ENV
    threads: RUN_THREADS
    resources:
        **RUN_RESOURCES,
    params:
        launcher=get_validation_launcher,
    shell:
        JOB_START + LAUNCHED_TRAINER + " validate " + RUN_DIR + " --wait >> {log} 2>&1"


rule collect_runs:
    input:
        get_run_results,
        get_confirmation,
    output:
        update(str(C.runs_csv)),
        update(str(C.campaign_json)),
    log:
        log_of(C.runs_csv),
    conda:
        CONDA_ENV
    params:
        campaign=CAMPAIGN_FILE,
        max_jobs=MAX_JOBS,
    shell:
        JOB_START + EBD2N + " collect {params.campaign:q} --max-jobs {params.max_jobs} >> {log} 2>&1"
