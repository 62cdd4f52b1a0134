/* Assertions shared by the unit tests: substring checks whose failure
 * message shows the whole text, since the text is what a user reads. */
#ifndef SAGAD_TESTS_UNIT_H
#define SAGAD_TESTS_UNIT_H

#include <criterion/criterion.h>
#include <string.h>

#define assert_contains(hay, needle)                                                               \
    cr_assert(strstr((hay), (needle)) != NULL, "expected \"%s\" in: %s", (needle), (hay))

#define assert_not_contains(hay, needle)                                                           \
    cr_assert(strstr((hay), (needle)) == NULL, "did not expect \"%s\" in: %s", (needle), (hay))

#endif
