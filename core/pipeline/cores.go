package pipeline

import "runtime"

// Cores is how many cores the process may use: GOMAXPROCS as the runtime
// chose it at start-up (the CPU count, or a container's CPU limit), read
// before a host raises GOMAXPROCS (capi runs one P more than the cores, so
// that cgo calls on every core do not make the scheduler take Ps back).
// The tuner sizes its first guess with it.
var Cores = runtime.GOMAXPROCS(0)
