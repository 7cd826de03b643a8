/* Mutant of the product check: a program that links the test-only library (src/store/testing/)
 * and calls into it, as hotcount would if someone linked hc_store_testing into it. Built, never
 * run: check_layers.sh must find the test-only code in it, or its check of hotcount could not
 * fail. */
#include "store_testing.h"

int main(void)
{
    hc_store_dynamodb_set_test_hooks(NULL, NULL);
    return 0;
}
