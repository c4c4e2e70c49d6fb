"""The runtime: the command line and the WSGI entry point uWSGI loads."""
