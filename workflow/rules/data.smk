# The token cache every run of the campaign reads, shared with other campaigns on the same data.
# No file inputs: the cache is defined by the campaign's data section, and a cache another
# campaign already built is reused as it is. The directory is the output because ebd2n builds it
# elsewhere and renames it into place; update(): a job run again keeps and reuses it.


rule prepare_cache:
    output:
        update(directory(str(CACHE))),
    log:
        str(RESULTS / LOGS / "caches" / f"{CACHE.name}.log"),
    benchmark:
        str(RESULTS / BENCHMARKS / "caches" / f"{CACHE.name}.tsv")
    conda:
        CONDA_ENV
    threads: PREPARE_THREADS
    resources:
        **PREPARE_RESOURCES,
    params:
        campaign=CAMPAIGN_FILE,
    shell:
        JOB_START + EBD2N + " campaign prepare {params.campaign:q} >> {log} 2>&1"
