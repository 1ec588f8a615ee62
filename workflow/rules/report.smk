# Campaign report after a passed audit: CSV, JSON, figures and the offline index.html.
# `snakemake -R report_campaign` (or `ebd2n report results/<campaign>`) rebuilds it from disk.


rule report_campaign:
    input:
        "results/{campaign}/audit.json",
    output:
        "results/{campaign}/report/index.html",
    log:
        "results/{campaign}/logs/report.log",
    shell:
        "{EBD2N} report results/{wildcards.campaign} > {log} 2>&1"
