"""What a table owner asks for, and how it is enforced: the policy itself (`model`), the
check every step that moves a task asks first (`gate`), and the hard quotas of Spark
minutes (`quotas`)."""
