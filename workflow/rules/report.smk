# Campaign report once every run passed its audit: CSV, JSON, figures and the offline index page.
# `snakemake -R report_campaign` (or `ebd2n report results/<campaign>`) rebuilds it from disk.


rule report_campaign:
    input:
        str(C.audit_runs),
    output:
        str(C.report_index),
    log:
        log_of(C.report_index),
    shell:
        "{EBD2N} report " + CAMPAIGN_DIR + " > {log} 2>&1"
