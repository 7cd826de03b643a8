/* The DynamoDB backend's credentials: the environment (AWS_ACCESS_KEY_ID, ...), then a profile
 * of the shared credentials file, as the AWS CLI looks them up. */
#include "ddb_impl.h"

/* Reads key = value lines of [profile] from an AWS credentials file. */
static void profile_read(const char *path, const char *profile, char **key, char **secret,
                         char **token)
{
    FILE *f = fopen(path, "r");
    char line[2048];
    char want[256];
    bool in = false;

    if (f == NULL) {
        return;
    }
    snprintf(want, sizeof(want), "[%s]", profile);
    while (fgets(line, sizeof(line), f) != NULL) {
        char *s = line;
        char *e = s + strlen(s);
        char *eq;
        char *v;
        char *ke;
        char **slot = NULL;

        while (s < e && (*s == ' ' || *s == '\t')) {
            s++;
        }
        while (e > s && (e[-1] == '\n' || e[-1] == '\r' || e[-1] == ' ' || e[-1] == '\t')) {
            *--e = '\0';
        }
        if (*s == '[') {
            in = strcmp(s, want) == 0;
            continue;
        }
        eq = strchr(s, '=');
        if (!in || eq == NULL) {
            continue;
        }
        ke = eq;
        while (ke > s && (ke[-1] == ' ' || ke[-1] == '\t')) {
            ke--;
        }
        v = eq + 1;
        while (*v == ' ' || *v == '\t') {
            v++;
        }
        if ((size_t)(ke - s) == strlen("aws_access_key_id") &&
            strncmp(s, "aws_access_key_id", (size_t)(ke - s)) == 0) {
            slot = key;
        } else if ((size_t)(ke - s) == strlen("aws_secret_access_key") &&
                   strncmp(s, "aws_secret_access_key", (size_t)(ke - s)) == 0) {
            slot = secret;
        } else if ((size_t)(ke - s) == strlen("aws_session_token") &&
                   strncmp(s, "aws_session_token", (size_t)(ke - s)) == 0) {
            slot = token;
        }
        if (slot != NULL && *slot == NULL) {
            *slot = strdup(v);
        }
    }
    explicit_bzero(line, sizeof(line));
    fclose(f);
}

void ddb_wipe_free(char *s)
{
    if (s != NULL) {
        explicit_bzero(s, strlen(s));
        free(s);
    }
}

hc_err_t ddb_load_credentials(ddb_store_t *ds, const char *profile, char *errstr,
                              size_t errstr_size)
{
    const char *env_key = getenv("AWS_ACCESS_KEY_ID");
    const char *env_secret = getenv("AWS_SECRET_ACCESS_KEY");
    const char *env_token = getenv("AWS_SESSION_TOKEN");
    char *key = NULL;
    char *secret = NULL;
    char *token = NULL;
    char path[1024];
    hc_err_t err = HC_OK;
    size_t n;

    if (env_key != NULL && env_key[0] != '\0' && env_secret != NULL && env_secret[0] != '\0') {
        key = strdup(env_key);
        secret = strdup(env_secret);
        token = env_token != NULL && env_token[0] != '\0' ? strdup(env_token) : NULL;
    } else {
        if (profile == NULL) {
            profile = getenv("AWS_PROFILE");
        }
        if (profile == NULL || profile[0] == '\0') {
            profile = "default";
        }
        if (getenv("AWS_SHARED_CREDENTIALS_FILE") != NULL) {
            snprintf(path, sizeof(path), "%s", getenv("AWS_SHARED_CREDENTIALS_FILE"));
        } else {
            snprintf(path, sizeof(path), "%s/.aws/credentials",
                     getenv("HOME") != NULL ? getenv("HOME") : "");
        }
        profile_read(path, profile, &key, &secret, &token);
    }
    if (key == NULL || secret == NULL) {
        hc_errstr_set(errstr, errstr_size,
                      "dynamodb store: no AWS credentials (set AWS_ACCESS_KEY_ID and "
                      "AWS_SECRET_ACCESS_KEY, or a profile in ~/.aws/credentials)");
        err = HC_ERR_INVALID;
        goto out;
    }
    if (strchr(key, ':') != NULL) {
        hc_errstr_set(errstr, errstr_size, "dynamodb store: the access key id contains ':'");
        err = HC_ERR_INVALID;
        goto out;
    }
    n = strlen(key) + 1 + strlen(secret) + 1;
    ds->userpwd = malloc(n);
    if (ds->userpwd == NULL) {
        err = HC_ERR_FATAL;
        hc_errstr_set(errstr, errstr_size, "dynamodb store: out of memory");
        goto out;
    }
    snprintf(ds->userpwd, n, "%s:%s", key, secret);
    if (token != NULL) {
        char *hdr;
        n = strlen("X-Amz-Security-Token: ") + strlen(token) + 1;
        hdr = malloc(n);
        if (hdr != NULL) {
            snprintf(hdr, n, "X-Amz-Security-Token: %s", token);
            ds->cred_hdr = curl_slist_append(NULL, hdr);
            ddb_wipe_free(hdr);
        }
        if (ds->cred_hdr == NULL) {
            err = HC_ERR_FATAL;
            hc_errstr_set(errstr, errstr_size, "dynamodb store: out of memory");
        }
    }
out:
    ddb_wipe_free(key);
    ddb_wipe_free(secret);
    ddb_wipe_free(token);
    return err;
}
