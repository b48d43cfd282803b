//! Which instruction-set paths the kernels take on this processor: one place that
//! detects features (once) and names the choice, for the kernels and for reports
//! (`nnc bench --json`, `nnc devices`).

use std::sync::OnceLock;

use serde::Serialize;

/// The processor features the kernels look for.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct CpuFeatures {
    pub avx2: bool,
    pub fma: bool,
    pub avx512f: bool,
    pub avx512bw: bool,
    pub avx512vl: bool,
    pub avx512_vnni: bool,
    pub avx_vnni: bool,
    /// Advanced SIMD (64-bit Arm; part of the base architecture, detected all the same).
    #[cfg(target_arch = "aarch64")]
    pub neon: bool,
    /// The 8-bit dot products `SDOT`/`UDOT` (Armv8.2's FEAT_DotProd).
    #[cfg(target_arch = "aarch64")]
    pub dotprod: bool,
}

/// The environment variable that caps the paths the kernels may take: `portable` (no
/// SIMD), `avx2` (AVX2 and FMA, no AVX-512: Zen 2/3, Skylake-class client parts),
/// `avxvnni` (AVX2, FMA and the 256-bit AVX-VNNI dot products, no AVX-512: Alder Lake
/// and later client parts), `neon` (64-bit Arm: NEON without the dot-product
/// instructions), anything else or unset: what the processor has. Like oneDNN's `ONEDNN_MAX_CPU_ISA`: for measuring one path against another and
/// testing the slower paths on a fast machine.
pub const MAX_ISA_VAR: &str = "NNC_MAX_ISA";

/// Detected once per process (capped by [`MAX_ISA_VAR`]).
pub fn cpu_features() -> CpuFeatures {
    static FEATURES: OnceLock<CpuFeatures> = OnceLock::new();
    *FEATURES.get_or_init(|| cap(detect(), std::env::var(MAX_ISA_VAR).ok().as_deref()))
}

fn cap(found: CpuFeatures, max: Option<&str>) -> CpuFeatures {
    match max {
        Some("portable") => CpuFeatures::default(),
        Some("avx2") => CpuFeatures {
            avx2: found.avx2,
            fma: found.fma,
            ..CpuFeatures::default()
        },
        Some("avxvnni") => CpuFeatures {
            avx2: found.avx2,
            fma: found.fma,
            avx_vnni: found.avx_vnni,
            ..CpuFeatures::default()
        },
        #[cfg(target_arch = "aarch64")]
        Some("neon") => CpuFeatures {
            neon: found.neon,
            ..CpuFeatures::default()
        },
        _ => found,
    }
}

#[cfg(target_arch = "x86_64")]
fn detect() -> CpuFeatures {
    use std::arch::is_x86_feature_detected as has;
    CpuFeatures {
        avx2: has!("avx2"),
        fma: has!("fma"),
        avx512f: has!("avx512f"),
        avx512bw: has!("avx512bw"),
        avx512vl: has!("avx512vl"),
        avx512_vnni: has!("avx512vnni"),
        avx_vnni: has!("avxvnni"),
    }
}

#[cfg(target_arch = "aarch64")]
fn detect() -> CpuFeatures {
    use std::arch::is_aarch64_feature_detected as has;
    CpuFeatures {
        neon: has!("neon"),
        dotprod: has!("dotprod"),
        ..CpuFeatures::default()
    }
}

#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
fn detect() -> CpuFeatures {
    CpuFeatures::default()
}

/// True when the float kernels' AVX2+FMA paths run.
pub fn float_avx2_fma() -> bool {
    let f = cpu_features();
    f.avx2 && f.fma
}

/// True when the float kernels' AVX-512 paths run (with AVX2 and FMA beside them).
pub fn float_avx512() -> bool {
    let f = cpu_features();
    f.avx512f && f.avx2 && f.fma
}

/// True when the quantized kernels' AVX2 paths run.
pub fn int8_avx2() -> bool {
    cpu_features().avx2
}

/// True when quantized convolutions take the 8-bit dot-product path (AVX512-VNNI's
/// `vpdpbusd` on 512-bit registers, and on 256-bit ones for narrow channel blocks; the
/// AVX2 output stage runs beside it). Every processor with AVX512-VNNI has AVX512VL.
pub fn int8_vnni() -> bool {
    let f = cpu_features();
    f.avx512f && f.avx512bw && f.avx512vl && f.avx512_vnni && f.avx2
}

/// True when quantized convolutions take the 8-bit dot-product path on 256-bit
/// registers with the VEX-encoded AVX-VNNI `vpdpbusd` (processors with AVX-VNNI and no
/// AVX512-VNNI: Alder Lake and later client parts); where both exist the 512-bit path
/// runs.
pub fn int8_avx_vnni() -> bool {
    let f = cpu_features();
    f.avx_vnni && f.avx2 && !int8_vnni()
}

/// True when the float kernels' NEON paths run (64-bit Arm).
#[cfg(target_arch = "aarch64")]
pub fn float_neon() -> bool {
    cpu_features().neon
}

/// True when the quantized kernels' NEON paths run (64-bit Arm): the 8-bit GEMM on
/// widening multiplies, or on `SDOT` where [`int8_dotprod`] holds.
#[cfg(target_arch = "aarch64")]
pub fn int8_neon() -> bool {
    cpu_features().neon
}

/// True when the quantized GEMM's NEON path runs on `SDOT` (four i8 x i8 products summed
/// into each i32 lane).
#[cfg(target_arch = "aarch64")]
pub fn int8_dotprod() -> bool {
    let f = cpu_features();
    f.neon && f.dotprod
}

/// The float kernels' path name.
#[cfg(target_arch = "x86_64")]
fn float_path() -> &'static str {
    if float_avx512() {
        // The convolutions' GEMM and depthwise kernels on 512-bit registers; the other
        // float kernels on AVX2 and FMA.
        "avx512"
    } else if float_avx2_fma() {
        "avx2+fma"
    } else {
        "portable"
    }
}

#[cfg(target_arch = "aarch64")]
fn float_path() -> &'static str {
    if float_neon() { "neon" } else { "portable" }
}

#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
fn float_path() -> &'static str {
    "portable"
}

/// The quantized GEMM's path name.
#[cfg(target_arch = "x86_64")]
fn int8_path() -> &'static str {
    if int8_vnni() {
        "avx512-vnni"
    } else if int8_avx_vnni() {
        "avx-vnni"
    } else if int8_avx2() {
        "avx2"
    } else {
        "portable"
    }
}

#[cfg(target_arch = "aarch64")]
fn int8_path() -> &'static str {
    if int8_dotprod() {
        "neon-dotprod"
    } else if int8_neon() {
        "neon"
    } else {
        "portable"
    }
}

#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
fn int8_path() -> &'static str {
    "portable"
}

/// What the kernels run on this processor.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct KernelIsa {
    pub arch: &'static str,
    pub cpu_features: CpuFeatures,
    /// The float kernels' path (`avx512`, `avx2+fma`, `neon` or `portable`).
    pub float: &'static str,
    /// The quantized GEMM's path: `avx512-vnni` (8-bit dot products), `avx-vnni` (the
    /// same on 256-bit registers), `avx2` (16-bit products), on 64-bit Arm `neon-dotprod` (`SDOT`) or `neon` (widening
    /// multiplies), or `portable`. Depthwise and elementwise kernels use AVX2 where
    /// present.
    pub int8: &'static str,
}

impl KernelIsa {
    /// One line: `float avx2+fma, int8 avx2 (cpu: avx2 fma avx512f ...)`.
    pub fn summary(&self) -> String {
        let f = &self.cpu_features;
        let present: Vec<&str> = [
            ("avx2", f.avx2),
            ("fma", f.fma),
            ("avx512f", f.avx512f),
            ("avx512bw", f.avx512bw),
            ("avx512vl", f.avx512vl),
            ("avx512_vnni", f.avx512_vnni),
            ("avx_vnni", f.avx_vnni),
            #[cfg(target_arch = "aarch64")]
            ("neon", f.neon),
            #[cfg(target_arch = "aarch64")]
            ("dotprod", f.dotprod),
        ]
        .into_iter()
        .filter_map(|(name, on)| on.then_some(name))
        .collect();
        format!(
            "float {}, int8 {} ({} features: {})",
            self.float,
            self.int8,
            self.arch,
            if present.is_empty() {
                "none of interest".to_string()
            } else {
                present.join(" ")
            }
        )
    }
}

/// The paths the kernels choose here.
pub fn report() -> KernelIsa {
    KernelIsa {
        arch: std::env::consts::ARCH,
        cpu_features: cpu_features(),
        float: float_path(),
        int8: int8_path(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    #[cfg(target_arch = "aarch64")]
    fn the_report_names_the_arm_paths() {
        let r = report();
        assert_eq!(r.float == "neon", float_neon());
        assert_eq!(r.int8 == "neon-dotprod", int8_dotprod());
        assert_eq!(r.int8 == "neon", int8_neon() && !int8_dotprod());
        assert_eq!(r.int8 == "portable", !int8_neon());
        assert!(!int8_vnni() && !int8_avx2() && !float_avx2_fma());
        assert_eq!(report(), r);
    }

    #[test]
    #[cfg(target_arch = "aarch64")]
    fn the_arm_cap_removes_the_dot_products() {
        let all = CpuFeatures {
            neon: true,
            dotprod: true,
            ..CpuFeatures::default()
        };
        assert_eq!(cap(all, None), all);
        assert_eq!(cap(all, Some("portable")), CpuFeatures::default());
        let neon = cap(all, Some("neon"));
        assert!(neon.neon && !neon.dotprod);
        // An x86 cap leaves no Arm path.
        assert_eq!(cap(all, Some("avx2")), CpuFeatures::default());
    }

    #[test]
    #[cfg(target_arch = "x86_64")]
    fn the_report_names_the_paths_the_kernels_take() {
        let r = report();
        assert_eq!(r.float == "avx512", float_avx512());
        assert_eq!(r.float == "avx2+fma", float_avx2_fma() && !float_avx512());
        assert_eq!(r.int8 == "avx512-vnni", int8_vnni());
        assert_eq!(r.int8 == "avx-vnni", int8_avx_vnni());
        assert!(!(int8_vnni() && int8_avx_vnni()));
        assert_eq!(r.int8 == "portable", !int8_vnni() && !int8_avx2());
        assert!(
            r.summary()
                .starts_with(&format!("float {}, int8 {}", r.float, r.int8))
        );
        // Stable within a process: detection runs once.
        assert_eq!(report(), r);
    }

    #[test]
    #[allow(clippy::field_reassign_with_default)]
    fn the_cap_removes_what_is_above_it() {
        // Field by field: the Arm fields exist only on Arm.
        let mut all = CpuFeatures::default();
        all.avx2 = true;
        all.fma = true;
        all.avx512f = true;
        all.avx512bw = true;
        all.avx512vl = true;
        all.avx512_vnni = true;
        all.avx_vnni = true;
        assert_eq!(cap(all, None), all);
        assert_eq!(cap(all, Some("native")), all);
        assert_eq!(cap(all, Some("portable")), CpuFeatures::default());
        let avx2 = cap(all, Some("avx2"));
        assert!(avx2.avx2 && avx2.fma && !avx2.avx512f && !avx2.avx512_vnni);
        assert!(!avx2.avx_vnni);
        let client = cap(all, Some("avxvnni"));
        assert!(client.avx2 && client.fma && client.avx_vnni);
        assert!(!client.avx512f && !client.avx512_vnni);
    }
}
