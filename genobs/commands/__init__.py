"""User-facing commands that judge a service (benchmark and compare gates); each
module is imported only when its command runs."""
