/* SPDX-License-Identifier: Apache-2.0 */
/* Run at configure time (CMakeLists.txt): the version of the OpenPMIx
 * library this build links, as the library itself says it. */
#include <pmix.h>
#include <stdio.h>

int main(void)
{
    const char *v = PMIx_Get_version();
    if (!v)
        return 1;
    fputs(v, stdout);
    return 0;
}
