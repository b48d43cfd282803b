//! Tensor files users hand to `nnc run`: numpy `.npy` and ONNX `TensorProto` `.pb`, and
//! PNG and JPEG images for uint8 image inputs.

use std::io::Cursor;
use std::path::Path;

use anyhow::Context;
use nnc_compiler::onnx::{proto, tensor};
use nnc_formats::limits::{LimitKind, Limits};
use nnc_formats::nn::IoInfo;
use nnc_formats::tensor::{DataType, HostTensor};

use crate::exit::{Exit, err};
use crate::input;

/// File formats for tensors.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum TensorFormat {
    Npy,
    Pb,
}

impl TensorFormat {
    pub fn extension(self) -> &'static str {
        match self {
            TensorFormat::Npy => "npy",
            TensorFormat::Pb => "pb",
        }
    }

    pub fn of(path: &Path) -> Option<TensorFormat> {
        match path.extension()?.to_str()?.to_ascii_lowercase().as_str() {
            "npy" => Some(TensorFormat::Npy),
            "pb" => Some(TensorFormat::Pb),
            _ => None,
        }
    }
}

/// Reads a tensor file, its format chosen by extension, within the default limits.
pub fn read(path: &Path) -> anyhow::Result<HostTensor> {
    read_within(path, &Limits::default())
}

/// Reads a tensor file, its format chosen by extension: a file or tensor beyond the
/// `tensor` limit is refused (exit 4) before its data is read. An image becomes a uint8
/// tensor [1, H, W, 3] (see [`read_input`] for one shaped as a model input wants).
pub fn read_within(path: &Path, limits: &Limits) -> anyhow::Result<HostTensor> {
    if is_image(path) {
        return decode_image(path, limits, None, ImageTarget::default());
    }
    let format = TensorFormat::of(path).ok_or_else(|| {
        err(
            Exit::Malformed,
            format!(
                "{}: unknown tensor file type (expected .npy, .pb, .png, .jpg or .jpeg)",
                path.display()
            ),
        )
    })?;
    let bytes = input::read_tensor_file(path, limits)?;
    match format {
        TensorFormat::Npy => nnc_formats::npy::read_npy(&bytes)
            .with_context(|| format!("{} is not a valid .npy file", path.display())),
        TensorFormat::Pb => {
            let proto = proto::decode_tensor(&bytes)
                .with_context(|| format!("{} is not an ONNX TensorProto", path.display()))?;
            let context = tensor::ExternalDataContext::none().with_limits(*limits);
            tensor::tensor_to_host(&proto, &context).map_err(|e| {
                let what = format!("cannot read tensor file {}", path.display());
                match e {
                    // Classified by the limit (exit 4), not as a malformed file.
                    tensor::OnnxTensorError::Limit { source, .. } => {
                        anyhow::Error::new(source).context(what)
                    }
                    e => anyhow::Error::new(e).context(what),
                }
            })
        }
    }
}

/// Serializes a tensor in `format`.
pub fn encode(t: &HostTensor, name: &str, format: TensorFormat) -> Vec<u8> {
    match format {
        TensorFormat::Npy => nnc_formats::npy::write_npy(t),
        TensorFormat::Pb => proto::encode_tensor(&tensor::host_to_tensor(t, name)),
    }
}

/// Reads the file given for model input `info`: a tensor file as [`read_within`] does,
/// with a float64 tensor for a float32 input converted (with a warning); or an image,
/// decoded into the layout and size the input declares.
// Until `nnc run` reads its inputs through it (run.rs: gather_inputs, compile_source).
pub fn read_input(path: &Path, limits: &Limits, info: &IoInfo) -> anyhow::Result<HostTensor> {
    if is_image(path) {
        let target = image_target(path, info)?;
        return decode_image(path, limits, Some(&info.name), target);
    }
    let t = read_within(path, limits)?;
    if t.dtype == DataType::F64 && info.dtype == DataType::F32 {
        return f64_to_f32(t, path, &info.name);
    }
    Ok(t)
}

/// Converts a float64 tensor to float32, warning on stderr. Values round to the nearest
/// float32; NaN and infinities stay what they are (a float32 file may hold them too); a
/// finite value beyond float32's range is refused rather than turned into an infinity.
fn f64_to_f32(t: HostTensor, path: &Path, name: &str) -> anyhow::Result<HostTensor> {
    let mut values = Vec::with_capacity(t.data.len() / 2);
    for (k, chunk) in t.data.chunks_exact(8).enumerate() {
        let mut bytes = [0u8; 8];
        bytes.copy_from_slice(chunk);
        let v = f64::from_le_bytes(bytes);
        let narrowed = v as f32;
        if v.is_finite() && !narrowed.is_finite() {
            return Err(err(
                Exit::Malformed,
                format!(
                    "input '{name}': {} holds float64 and the model takes float32, but element \
                     {k} ({v:e}) is beyond float32's range (about 3.4e38)",
                    path.display()
                ),
            ));
        }
        values.extend_from_slice(&narrowed.to_le_bytes());
    }
    eprintln!(
        "warning: input '{name}': {} holds float64 and the model takes float32; its values \
         were rounded to float32",
        path.display()
    );
    Ok(HostTensor::new(DataType::F32, t.shape, values)?)
}

/// The largest image nnc decodes, in pixels (8192 x 8192): a few bytes of PNG or JPEG can
/// declare an image of gigabytes (a decompression bomb), so the size in the header is
/// checked before anything is decoded.
pub const MAX_IMAGE_PIXELS: u64 = 8192 * 8192;

/// Whether `path` names a PNG or JPEG file (by extension).
pub fn is_image(path: &Path) -> bool {
    path.extension()
        .and_then(|e| e.to_str())
        .is_some_and(|e| matches!(e.to_ascii_lowercase().as_str(), "png" | "jpg" | "jpeg"))
}

/// The tensor an image becomes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct ImageTarget {
    /// [1, C, H, W] rather than [1, H, W, C].
    nchw: bool,
    /// 3 (RGB) or 1 (grey).
    channels: u32,
    /// Required height and width; 0: any.
    height: u32,
    width: u32,
}

impl Default for ImageTarget {
    fn default() -> Self {
        ImageTarget {
            nchw: false,
            channels: 3,
            height: 0,
            width: 0,
        }
    }
}

/// What an image for model input `info` must become: the input must be a 4-D uint8
/// tensor of batch 1 with 3 (or 1) channels last or first.
fn image_target(path: &Path, info: &IoInfo) -> anyhow::Result<ImageTarget> {
    let shown = |dims: &[u32]| {
        let dims: Vec<String> = dims
            .iter()
            .map(|&d| if d == 0 { "?".into() } else { d.to_string() })
            .collect();
        format!("[{}]", dims.join(", "))
    };
    let refuse = |problem: String| {
        err(
            Exit::Malformed,
            format!(
                "input '{}' takes {} {}: {problem}",
                info.name,
                info.dtype,
                shown(&info.dims)
            ),
        )
    };
    let target = match *info.dims.as_slice() {
        [n, h, w, c] if n <= 1 && (c == 3 || c == 1) => Some(ImageTarget {
            nchw: false,
            channels: c,
            height: h,
            width: w,
        }),
        [n, c, h, w] if n <= 1 && (c == 3 || c == 1) => Some(ImageTarget {
            nchw: true,
            channels: c,
            height: h,
            width: w,
        }),
        _ => None,
    };
    let Some(target) = target else {
        return Err(refuse(format!(
            "{} is an image, which feeds only a uint8 input of shape [1, H, W, 3] or \
             [1, 3, H, W] (or 1 channel)",
            path.display()
        )));
    };
    if info.dtype != DataType::U8 {
        return Err(refuse(format!(
            "{} is an image, of uint8 pixels; compile the model with `--input-preprocess \
             {}=rgb,mean=R,G,B,std=R,G,B` to make it take uint8 images, or give a tensor file",
            path.display(),
            info.name
        )));
    }
    Ok(target)
}

/// Decodes a PNG or JPEG into a uint8 tensor as `target` says. The size in the header
/// is checked against [`MAX_IMAGE_PIXELS`] and the `tensor` limit before decoding, and
/// the decoder runs with that size as its own limit.
fn decode_image(
    path: &Path,
    limits: &Limits,
    input: Option<&str>,
    target: ImageTarget,
) -> anyhow::Result<HostTensor> {
    let bytes = input::read_tensor_file(path, limits)?;
    let for_input = input.map_or(String::new(), |name| format!(" (input '{name}')"));
    let malformed = |e: &dyn std::fmt::Display| {
        err(
            Exit::Malformed,
            format!(
                "{}{for_input} is not a PNG or JPEG image nnc can read: {e}",
                path.display()
            ),
        )
    };
    let reader = || -> anyhow::Result<image::ImageReader<Cursor<&[u8]>>> {
        let reader = image::ImageReader::new(Cursor::new(bytes.as_slice()))
            .with_guessed_format()
            .map_err(|e| malformed(&e))?;
        match reader.format() {
            Some(image::ImageFormat::Png | image::ImageFormat::Jpeg) => Ok(reader),
            _ => Err(malformed(&"its content is neither PNG nor JPEG")),
        }
    };
    // The header alone, under the decoder's default memory limit.
    let (width, height) = reader()?.into_dimensions().map_err(|e| match e {
        image::ImageError::Limits(e) => err(
            Exit::Limit,
            format!(
                "{}{for_input}: its header asks for more memory than an image may take: {e}",
                path.display()
            ),
        ),
        e => malformed(&e),
    })?;
    let pixels = u64::from(width) * u64::from(height);
    if pixels > MAX_IMAGE_PIXELS {
        return Err(err(
            Exit::Limit,
            format!(
                "{}{for_input} is a {width}x{height} image ({pixels} pixels), beyond the largest \
                 nnc decodes ({MAX_IMAGE_PIXELS} pixels, 8192x8192)",
                path.display()
            ),
        ));
    }
    let size = pixels * u64::from(target.channels);
    limits.check(
        LimitKind::Tensor,
        || format!("image {}{for_input} ({width}x{height})", path.display()),
        Some(size),
    )?;
    if (target.width != 0 && target.width != width)
        || (target.height != 0 && target.height != height)
    {
        let want = |d: u32| {
            if d == 0 {
                "any".to_string()
            } else {
                d.to_string()
            }
        };
        return Err(err(
            Exit::Malformed,
            format!(
                "{}{for_input} is {width}x{height} (width x height), but the input takes {}x{} \
                 images; nnc does not resize images: resize it first",
                path.display(),
                want(target.width),
                want(target.height)
            ),
        ));
    }
    // The decoder may hold up to 8 bytes a pixel (16-bit RGBA) while converting.
    let mut decoder_limits = image::Limits::default();
    decoder_limits.max_image_width = Some(width);
    decoder_limits.max_image_height = Some(height);
    decoder_limits.max_alloc = Some(pixels * 8 + (1 << 20));
    let mut reader = reader()?;
    reader.limits(decoder_limits);
    let decoded = reader.decode().map_err(|e| match e {
        image::ImageError::Limits(e) => err(
            Exit::Limit,
            format!(
                "{}{for_input}: decoding a {width}x{height} image needs more memory than it \
                 should ({e})",
                path.display()
            ),
        ),
        e => malformed(&e),
    })?;
    let interleaved = if target.channels == 1 {
        decoded.into_luma8().into_raw()
    } else {
        decoded.into_rgb8().into_raw()
    };
    let (h, w, c) = (height as usize, width as usize, target.channels as usize);
    let (shape, data) = if target.nchw && c > 1 {
        let mut planar = vec![0u8; interleaved.len()];
        for (p, pixel) in interleaved.chunks_exact(c).enumerate() {
            for (k, &v) in pixel.iter().enumerate() {
                planar[k * h * w + p] = v;
            }
        }
        (vec![1, c, h, w], planar)
    } else if target.nchw {
        (vec![1, c, h, w], interleaved)
    } else {
        (vec![1, h, w, c], interleaved)
    };
    Ok(HostTensor::new(DataType::U8, shape, data)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(dtype: DataType, dims: &[u32]) -> IoInfo {
        IoInfo {
            name: "image".into(),
            dtype,
            dims: dims.to_vec(),
        }
    }

    /// A 4x2 RGB PNG whose pixel (x, y) is (x, y, x + y) times 10, in `dir`.
    fn png(dir: &Path, name: &str) -> std::path::PathBuf {
        let img = image::RgbImage::from_fn(4, 2, |x, y| {
            image::Rgb([(x * 10) as u8, (y * 10) as u8, ((x + y) * 10) as u8])
        });
        let path = dir.join(name);
        img.save(&path).expect("writes the png");
        path
    }

    fn dir() -> tempfile::TempDir {
        tempfile::tempdir().expect("temp dir")
    }

    #[test]
    fn an_image_becomes_nhwc_or_nchw_as_the_input_declares() {
        let d = dir();
        let path = png(d.path(), "p.png");
        let limits = Limits::default();
        let nhwc = read_input(&path, &limits, &info(DataType::U8, &[1, 2, 4, 3])).expect("nhwc");
        assert_eq!(
            (nhwc.dtype, nhwc.shape.as_slice()),
            (DataType::U8, &[1, 2, 4, 3][..])
        );
        // Pixel (x=1, y=1): (10, 10, 20).
        assert_eq!(nhwc.data[(4 + 1) * 3..(4 + 1) * 3 + 3], [10, 10, 20]);
        let nchw = read_input(&path, &limits, &info(DataType::U8, &[0, 3, 0, 0])).expect("nchw");
        assert_eq!(nchw.shape, [1, 3, 2, 4]);
        // Plane 0 is red (x * 10), plane 1 green (y * 10).
        assert_eq!(nchw.data[..4], [0, 10, 20, 30]);
        assert_eq!(nchw.data[8..16], [0, 0, 0, 0, 10, 10, 10, 10]);
        // Without an input to follow, [1, H, W, 3].
        assert_eq!(read_within(&path, &limits).expect("plain").data, nhwc.data);
        let grey = read_input(&path, &limits, &info(DataType::U8, &[1, 1, 2, 4])).expect("grey");
        assert_eq!(grey.shape, [1, 1, 2, 4]);
    }

    #[test]
    fn a_jpeg_is_read_too() {
        let d = dir();
        let path = d.path().join("flat.jpg");
        image::RgbImage::from_pixel(8, 8, image::Rgb([200, 100, 50]))
            .save(&path)
            .expect("writes the jpeg");
        let t = read_input(
            &path,
            &Limits::default(),
            &info(DataType::U8, &[1, 8, 8, 3]),
        )
        .expect("reads");
        // Lossy: near the colour written.
        for (k, &v) in t.data.iter().enumerate() {
            let want = [200i32, 100, 50][k % 3];
            assert!((i32::from(v) - want).abs() <= 4, "{k}: {v}");
        }
    }

    #[test]
    fn an_image_must_fit_the_input() {
        let d = dir();
        let path = png(d.path(), "p.png");
        let limits = Limits::default();
        let message = |dims: &[u32], dtype| {
            read_input(&path, &limits, &info(dtype, dims))
                .expect_err("refused")
                .to_string()
        };
        let e = message(&[1, 224, 224, 3], DataType::U8);
        assert!(
            e.contains(
                "is 4x2 (width x height), but the input takes 224x224 images; nnc does not resize"
            ),
            "{e}"
        );
        assert!(e.contains("(input 'image')"), "{e}");
        let e = message(&[1, 3, 2, 4], DataType::F32);
        assert!(
            e.contains("input 'image' takes float32 [1, 3, 2, 4]"),
            "{e}"
        );
        assert!(e.contains("--input-preprocess image=rgb"), "{e}");
        let e = message(&[1, 1000], DataType::U8);
        assert!(
            e.contains("feeds only a uint8 input of shape [1, H, W, 3]"),
            "{e}"
        );
        let e = message(&[2, 2, 4, 3], DataType::U8);
        assert!(e.contains("feeds only"), "{e}");
    }

    #[test]
    fn a_small_tensor_limit_refuses_a_large_image() {
        let d = dir();
        let path = png(d.path(), "p.png");
        let limits = Limits {
            max_tensor_bytes: 16,
            ..Limits::default()
        };
        let e = read_within(&path, &limits).expect_err("refused");
        assert!(format!("{e:#}").contains("4x2"), "{e:#}");
    }

    #[test]
    fn not_an_image_inside_is_malformed() {
        let d = dir();
        let path = d.path().join("fake.png");
        std::fs::write(&path, b"this is text, not pixels").expect("writes");
        let e = read_within(&path, &Limits::default()).expect_err("refused");
        assert!(
            e.to_string()
                .contains("is not a PNG or JPEG image nnc can read"),
            "{e}"
        );
    }

    fn npy_f64(dir: &Path, values: &[f64]) -> std::path::PathBuf {
        let data: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
        let t = HostTensor::new(DataType::F64, vec![values.len()], data).expect("tensor");
        let path = dir.join("x.npy");
        std::fs::write(&path, nnc_formats::npy::write_npy(&t)).expect("writes");
        path
    }

    #[test]
    fn float64_for_a_float32_input_is_converted() {
        let d = dir();
        let path = npy_f64(d.path(), &[1.5, -0.1, f64::NAN, f64::INFINITY]);
        let t = read_input(&path, &Limits::default(), &info(DataType::F32, &[4])).expect("reads");
        let values = t.to_f32_vec().expect("float32");
        assert_eq!(t.dtype, DataType::F32);
        assert_eq!(values[..2], [1.5, -0.1f32]);
        assert!(values[2].is_nan() && values[3] == f32::INFINITY);
        // A float64 input keeps its float64.
        let t = read_input(&path, &Limits::default(), &info(DataType::F64, &[4])).expect("reads");
        assert_eq!(t.dtype, DataType::F64);
    }

    #[test]
    fn float64_beyond_float32_is_refused() {
        let d = dir();
        let path = npy_f64(d.path(), &[0.0, 1e300]);
        let e = read_input(&path, &Limits::default(), &info(DataType::F32, &[2]))
            .expect_err("refused")
            .to_string();
        assert!(
            e.contains("element 1 (1e300) is beyond float32's range"),
            "{e}"
        );
    }
}
