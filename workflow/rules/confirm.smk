# Confirmation on fresh seeds (campaign `confirm`, ebd2n.campaign.confirmation): once every grid run
# is validated, the best `confirm.top` points of each preset x mode are chosen; the choice is a
# checkpoint, so Snakemake plans their runs on `confirm.seeds` (trained and validated by the rules
# every run goes through) as soon as it is made. Its output is update(): run again (after a kill),
# the job finds what it chose and keeps it; a grid extension asks for a selection of another name.


checkpoint select_confirmation:
    input:
        get_run_results,
    output:
        update(str(C.confirm_selection("{digest}"))),
    log:
        log_of(C.confirm_selection("{digest}")),
    conda:
        CONDA_ENV
    params:
        campaign=CAMPAIGN_FILE,
    shell:
        JOB_START + EBD2N + " confirm-select {params.campaign:q} --digest {wildcards.digest} >> {log} 2>&1"
