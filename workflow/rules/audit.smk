# The audit, in two steps around the report. audit_runs checks every run (completeness, recipes,
# frozen trainer, hashes, retention, the ledger) before the report is built, so a failure stops
# the workflow first; audit_campaign then rebuilds the published report elsewhere and compares it,
# and writes audit.json (every check) and, only when all passed, the ledger and audit.passed, its
# output. audit.json and the ledger are no outputs: Snakemake never deletes or restores them, and
# audit.json keeps the ledger's own hash (see ebd2n.audit).


rule audit_runs:
    input:
        str(C.runs_csv),
        str(C.campaign_json),
    output:
        str(C.audit_runs),
    log:
        log_of(C.audit_runs),
    shell:
        "{EBD2N} audit " + CAMPAIGN_DIR + " --stage runs > {log} 2>&1"


rule audit_campaign:
    input:
        str(C.report_index),
    output:
        str(C.audit_passed),
    log:
        log_of(C.audit),
    shell:
        "{EBD2N} audit " + CAMPAIGN_DIR + " > {log} 2>&1"
