/*
 * uwsgi.h includes <pcre2.h> when uWSGI was built with PCRE2, as pyuwsgi's wheels are. It only
 * names the type pcre2_code, behind a pointer, so this declaration is all a plugin needs. The
 * plugin uses no regular expression, so it builds without PCRE2's headers installed.
 */
typedef struct pcre2_real_code_8 pcre2_code;
