// See jpegwin.h.

#include "jpegwin.h"

#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jpeglib.h>

#include "kernels.h"

typedef struct {
  struct jpeg_error_mgr pub;
  jmp_buf jb;
  char msg[JMSG_LENGTH_MAX];   // the fatal error
  char warn[JMSG_LENGTH_MAX];  // the first warning
} spdl_jpeg_err;

struct spdl_jpeg {
  struct jpeg_decompress_struct ci;
  spdl_jpeg_err err;
  spdl_jpeg_window win;
};

spdl_jpeg_window *spdl_jpeg_win(spdl_jpeg *d) { return &d->win; }

static void on_error_exit(j_common_ptr ci) {
  spdl_jpeg_err *e = (spdl_jpeg_err *)ci->err;
  (*ci->err->format_message)(ci, e->msg);
  longjmp(e->jb, 1);
}

// Warnings (level -1) are counted and the first one kept, as TurboJPEG
// does; trace messages are dropped. Nothing is printed.
static void on_emit_message(j_common_ptr ci, int level) {
  spdl_jpeg_err *e = (spdl_jpeg_err *)ci->err;
  if (level < 0) {
    if (ci->err->num_warnings == 0) (*ci->err->format_message)(ci, e->warn);
    ci->err->num_warnings++;
  }
}

static void on_output_message(j_common_ptr ci) { (void)ci; }

spdl_jpeg *spdl_jpeg_new(void) {
  spdl_jpeg *d = calloc(1, sizeof *d);
  if (d == NULL) return NULL;
  d->ci.err = jpeg_std_error(&d->err.pub);
  d->err.pub.error_exit = on_error_exit;
  d->err.pub.emit_message = on_emit_message;
  d->err.pub.output_message = on_output_message;
  if (setjmp(d->err.jb)) {  // out of memory in jpeg_create_decompress
    jpeg_destroy_decompress(&d->ci);
    free(d);
    return NULL;
  }
  jpeg_create_decompress(&d->ci);
  return d;
}

void spdl_jpeg_free(spdl_jpeg *d) {
  if (d == NULL) return;
  jpeg_destroy_decompress(&d->ci);
  free(d);
}

int spdl_jpeg_decode_window(spdl_jpeg *d, const uint8_t *data, size_t size, spdl_jpeg_window *win,
                            uint8_t *dst, int64_t dst_stride) {
  j_decompress_ptr ci = &d->ci;
  d->err.msg[0] = 0;
  d->err.warn[0] = 0;
  d->err.pub.num_warnings = 0;
  win->msg[0] = 0;
  if (setjmp(d->err.jb)) {
    jpeg_abort_decompress(ci);
    memcpy(win->msg, d->err.msg, sizeof win->msg);
    win->msg[sizeof win->msg - 1] = 0;
    return SPDL_JPEG_ERROR;
  }
  jpeg_mem_src(ci, (const unsigned char *)data, (unsigned long)size);
  jpeg_read_header(ci, TRUE);
  if (ci->jpeg_color_space == JCS_CMYK || ci->jpeg_color_space == JCS_YCCK) {
    jpeg_abort_decompress(ci);
    return SPDL_JPEG_CMYK;
  }
  // A progressive JPEG's coefficients are all decoded before the first row
  // either way; measured, a window decode was no faster than a whole one.
  if (ci->progressive_mode) {
    jpeg_abort_decompress(ci);
    return SPDL_JPEG_WHOLE;
  }
  ci->scale_num = (unsigned int)win->scale_num;
  ci->scale_denom = (unsigned int)win->scale_denom;
  ci->dct_method = JDCT_ISLOW;
  ci->do_fancy_upsampling = TRUE;
  switch (win->fmt) {
    case SPDL_PK_BGR:
      ci->out_color_space = JCS_EXT_BGR;
      break;
    case SPDL_PK_GRAY:
      ci->out_color_space = JCS_GRAYSCALE;
      break;
    default:
      ci->out_color_space = JCS_EXT_RGB;
  }
  jpeg_start_decompress(ci);
  int c = win->fmt == SPDL_PK_GRAY ? 1 : 3;
  if ((int32_t)ci->output_width != win->w || (int32_t)ci->output_height != win->h ||
      ci->output_components != c || win->x0 < 0 || win->x1 > win->w || win->x0 >= win->x1 ||
      win->y0 < 0 || win->y1 > win->h || win->y0 >= win->y1) {
    snprintf(d->err.msg, sizeof d->err.msg, "window %d..%d x %d..%d of a %ux%u image (want %dx%d)",
             win->x0, win->x1, win->y0, win->y1, ci->output_width, ci->output_height, win->w,
             win->h);
    longjmp(d->err.jb, 1);
  }
  JDIMENSION xoff = (JDIMENSION)win->x0, width = (JDIMENSION)(win->x1 - win->x0);
  if (width < ci->output_width) jpeg_crop_scanline(ci, &xoff, &width);
  if ((int64_t)width * c > dst_stride) {
    snprintf(d->err.msg, sizeof d->err.msg, "cropped width %u is wider than the buffer", width);
    longjmp(d->err.jb, 1);
  }
  win->out_x0 = (int32_t)xoff;
  win->out_w = (int32_t)width;
  if (win->y0 > 0) jpeg_skip_scanlines(ci, (JDIMENSION)win->y0);
  while ((int32_t)ci->output_scanline < win->y1) {
    JSAMPROW rows[8];
    int32_t n = win->y1 - (int32_t)ci->output_scanline;
    if (n > 8) n = 8;
    for (int32_t i = 0; i < n; i++)
      rows[i] = dst + ((int64_t)ci->output_scanline - win->y0 + i) * dst_stride;
    if (jpeg_read_scanlines(ci, rows, (JDIMENSION)n) == 0) break;  // suspended: cannot happen with a memory source
  }
  int rc = SPDL_JPEG_OK;
  if (d->err.pub.num_warnings > 0) {
    memcpy(win->msg, d->err.warn, sizeof win->msg);
    win->msg[sizeof win->msg - 1] = 0;
    rc = SPDL_JPEG_WARNING;
  }
  if ((int32_t)ci->output_scanline < win->y1) {
    snprintf(win->msg, sizeof win->msg, "decoding stopped at row %u of %d", ci->output_scanline, win->y1);
    rc = SPDL_JPEG_ERROR;
  }
  jpeg_abort_decompress(ci);  // stop here: the rest of the data is not needed
  return rc;
}
