# The audit, in two steps around the report. audit_runs checks every run (completeness, recipes,
# frozen trainer, hashes, retention, the ledger) before the report is built, so a failure stops
# the workflow first. The full audit is rule `all` (workflow/Snakefile): it has no output, so it
# runs every time jobs run, and checks the runs and the published report by content, whatever
# their times say; it writes audit.json and, only when every check passed, the ledger and
# audit.passed (removed when a check fails). audit-runs.json is update(): kept while its job runs,
# so an audit that finds the runs as its record says leaves it byte for byte (the report shows it).


rule audit_runs:
    input:
        str(C.runs_csv),
        str(C.campaign_json),
    output:
        update(str(C.audit_runs)),
    log:
        log_of(C.audit_runs),
    conda:
        CONDA_ENV
    shell:
        JOB_START + EBD2N + " audit " + CAMPAIGN_DIR + " --stage runs >> {log} 2>&1"
