# Full validation of every run's final checkpoint, then one table over the campaign's finished runs.


rule validate_run:
    input:
        f"{RUN}/final.pt",
    output:
        f"{RUN}/results.json",
    log:
        "results/{campaign}/logs/runs/{run}/results.log",
    benchmark:
        "results/{campaign}/benchmarks/runs/{run}/results.tsv"
    threads: RUN_THREADS
    resources:
        **RUN_RESOURCES,
    shell:
        TRAINER + " validate " + RUN_DIR + " > {log} 2>&1"


rule collect_runs:
    input:
        get_run_results,
    output:
        "results/{campaign}/runs.csv",
        "results/{campaign}/campaign.json",
    log:
        "results/{campaign}/logs/runs.log",
    shell:
        "{EBD2N} collect {CAMPAIGN_FILE:q} > {log} 2>&1"
