/* tests/win/CUnit/Basic.h: CUnit's basic run mode, for the Windows build's stand-in (CUnit.h). */
#ifndef TL_TESTS_WIN_CUNIT_BASIC_H
#define TL_TESTS_WIN_CUNIT_BASIC_H

#include "CUnit.h"

typedef enum { CU_BRM_NORMAL = 0, CU_BRM_SILENT, CU_BRM_VERBOSE } CU_BasicRunMode;

/* How much a run prints: silent (failures only), normal (and a summary), verbose (and each test). */
void CU_basic_set_mode(CU_BasicRunMode mode);
/* Run every test of every suite in the order added; CUE_SUCCESS once run. */
CU_ErrorCode CU_basic_run_tests(void);

#endif
