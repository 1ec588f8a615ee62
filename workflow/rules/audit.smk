# Audit of a finished campaign (results/<campaign>/audit.json): rules come with the audit issue.
