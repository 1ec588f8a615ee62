# Campaign report (results/<campaign>/report/) and run dashboards: rules come with the report issue.
