"""Jobs that run elsewhere: render Anyscale job.yaml, submit and watch through backends."""
