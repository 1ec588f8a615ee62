# Audit of the finished campaign: every check of the SPEC, the artifact ledger, audit.json.
# A failed audit exits non-zero with its violations, so the report is not built over bad results;
# the ledger (audit-ledger.json) is not an output, so a failure never loses it.


rule audit_campaign:
    input:
        "results/{campaign}/runs.csv",
        "results/{campaign}/campaign.json",
    output:
        "results/{campaign}/audit.json",
    log:
        "results/{campaign}/logs/audit.log",
    shell:
        "{EBD2N} audit results/{wildcards.campaign} > {log} 2>&1"
