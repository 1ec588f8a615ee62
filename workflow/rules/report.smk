# Campaign report once every run passed its audit: CSV, JSON, figures and the offline index page.
# `snakemake -R report_campaign` (or `ebd2n report results/<campaign>`) rebuilds it from disk. The
# index is update(): kept while the job runs, so an unchanged rebuild leaves the published report as
# it is and a changed one moves it to report/history/.


rule report_campaign:
    input:
        str(C.audit_runs),
    output:
        update(str(C.report_index)),
    log:
        log_of(C.report_index),
    conda:
        CONDA_ENV
    shell:
        JOB_START + EBD2N + " report " + CAMPAIGN_DIR + " >> {log} 2>&1"
