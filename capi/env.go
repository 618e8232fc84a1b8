package main

/*
#include <stdlib.h>
extern char **environ;
static char *spdl_env_at(int i) { return environ ? environ[i] : NULL; }
*/
import "C"

import "github.com/spdl-go/spdl-go/core/storage"

// Go copies the process environment when the library loads; a Python
// program that sets AWS_PROFILE, GOOGLE_APPLICATION_CREDENTIALS or the
// like afterwards (in os.environ, which is the C environment) would not be
// seen by the cloud SDKs. When it makes a client, storage reads their
// variables from the C environment again.
func init() {
	storage.EnvSync = func() { storage.SyncCloudEnv(cEnviron()) }
}

// cEnviron returns the C environment's entries. The strings are copied:
// C keeps its own.
func cEnviron() []string {
	var out []string
	for i := 0; ; i++ {
		p := C.spdl_env_at(C.int(i))
		if p == nil {
			return out
		}
		out = append(out, C.GoString(p))
	}
}
