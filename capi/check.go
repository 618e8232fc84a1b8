package main

// #include "bridge.h"
import "C"

import (
	"fmt"
	"unsafe"

	"github.com/spdl-go/spdl-go/core/options"
	"github.com/spdl-go/spdl-go/core/pipeline"
	"github.com/spdl-go/spdl-go/core/sampler"
)

//export spdl_spec_check
func spdl_spec_check(part *C.spdl_cchar, spec *C.spdl_cchar, specLen C.size_t, errOut **C.char) (rc C.int) {
	defer guard(&rc, errOut)
	if err := checkSpec(C.GoString(part), C.GoBytes(unsafe.Pointer(spec), C.int(specLen))); err != nil {
		setErr(errOut, err)
		return C.SPDL_ERROR
	}
	return C.SPDL_OK
}

// checkSpec checks one part of a spec as the host builds it, with the
// functions that read it for the build, so that a builder can refuse an
// argument when it is given and the build can never disagree:
//
//	"stage":    one of the spec's stages (readStage); its op is not built
//	"pipeline": the pipeline's settings (readSettings), some or all of them
//	"sampling": a sampled source's sampling group (sampler.ReadOptions)
func checkSpec(part string, raw []byte) error {
	var m map[string]any
	if err := decodeJSON(raw, &m); err != nil {
		return fmt.Errorf("%s spec is not a valid JSON object: %w", part, err)
	}
	switch part {
	case "stage":
		_, _, err := readStage(m)
		return err
	case "pipeline":
		r := options.New(m)
		if err := readSettings(r, &pipeline.Config{}); err != nil {
			return err
		}
		if err := r.Done(); err != nil {
			return fmt.Errorf("pipeline spec: %w", err)
		}
		return nil
	case "sampling":
		// Read as the group it is in a source's options, so that errors
		// name it as the build does ("sampling.seed").
		r, err := options.New(map[string]any{"sampling": m}).Sub("sampling")
		if err != nil {
			return err
		}
		if _, err := sampler.ReadOptions(r); err != nil {
			return err
		}
		return r.Done()
	}
	return fmt.Errorf("spec check: unknown part %q (want \"stage\", \"pipeline\" or \"sampling\")", part)
}
