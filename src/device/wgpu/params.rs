//! The parameter block of every shader as a Rust struct.
//!
//! Each `shaders/<stem>.wgsl` declares one `struct Params` of `u32` words (floats travel as
//! their bits), shared by its entry points. Its Rust twin below has the same fields in the
//! same order, `#[repr(C)]` and `Pod`, so it is copied into the parameter ring as it is. A
//! launch takes the struct, never loose words, and refuses a struct of another shader; a
//! unit test parses every shader with naga and checks each struct's field names, order and
//! types against the WGSL, so a parameter cannot be passed in the wrong position.
//!
//! Launch helpers that split work fill the leading fields themselves: [`Context::launch_chunked`]
//! sets `n, base`; [`Context::launch_followed`] sets `n, base, same_base, follow_base` (they
//! check that the struct starts with those names).
//!
//! [`Context::launch_chunked`]: super::Context::launch_chunked
//! [`Context::launch_followed`]: super::Context::launch_followed

use crate::error::{Error, Result};

/// A shader's parameter block (see the module docs).
pub trait Params: bytemuck::Pod + Default {
    /// The shader's file stem.
    const STEM: &'static str;
    /// The field names, in order, as in the WGSL `struct Params`.
    const FIELDS: &'static [&'static str];
}

/// The words of `p`, as the ring receives them.
pub(crate) fn words<P: Params>(p: &P) -> &[u32] {
    bytemuck::cast_slice(bytemuck::bytes_of(p))
}

/// Sets the leading fields of `p`, checking they are named `names`.
pub(crate) fn set_prefix<P: Params>(p: &mut P, names: &[&str], values: &[u32]) -> Result<()> {
    if P::FIELDS.len() < names.len() || P::FIELDS[..names.len()] != *names {
        return Err(Error::Backend {
            backend: "wgpu",
            msg: format!(
                "shaders/{}.wgsl: this launch sets the parameters {names:?} first, the shader's \
                 Params starts with {:?}",
                P::STEM,
                &P::FIELDS[..names.len().min(P::FIELDS.len())]
            ),
        });
    }
    let w: &mut [u32] = bytemuck::cast_slice_mut(bytemuck::bytes_of_mut(p));
    w[..values.len()].copy_from_slice(values);
    Ok(())
}

macro_rules! params {
    ($($stem:literal => $name:ident { $($field:ident),* $(,)? })*) => {
        $(
            #[doc = concat!("The `Params` of `shaders/", $stem, ".wgsl` (see its header).")]
            #[repr(C)]
            #[derive(Clone, Copy, Debug, Default, bytemuck::Pod, bytemuck::Zeroable)]
            #[allow(missing_docs)]
            pub struct $name {
                $(pub $field: u32,)*
            }
            impl Params for $name {
                const STEM: &'static str = $stem;
                const FIELDS: &'static [&'static str] = &[$(stringify!($field)),*];
            }
        )*
        /// Every shader's parameter struct: (stem, field names).
        #[cfg(test)]
        pub(crate) const ALL: &[(&str, &[&str])] = &[$(($stem, <$name as Params>::FIELDS)),*];
    };
}

params! {
    "adam" => AdamParams { n, base, lr, b1, b2, eps, wd, bc1, bc2, shrink, decoupled }
    "argmax" => ArgmaxParams { r, c, r0, x_base, out_base }
    "assign" => AssignParams { n, base, word }
    "binary" => BinaryParams { n, base, same_base, follow_base, cols, op, bcast }
    "concat" => ConcatParams { n, width, dst_cols, col0, r0, src_base, dst_base }
    "cross_entropy" => CrossEntropyParams { r, c, inv_n, r0, x_base, v_base, first, last }
    "dropout" => DropoutParams { n, base, same_base, follow_base, c, key, threshold, scale }
    "index_select" => IndexSelectParams { n, f, r0, idx_base, out_base, t0, t1, x_base, pos_base, first }
    "log_softmax" => LogSoftmaxParams { r, c, r0, base }
    "lstm_aggregate" => LstmAggregateParams { m, h, k, t, offset, i0, row_base, cs_base, wide_base, node_base, idx_base, t0, t1, x_base }
    "lstm_cell" => LstmCellParams { n, h, r0, base4, base1, base2 }
    "matmul" => MatmulParams { m, n, k, ta, tb, accumulate, count, w, tr, tc, r0, c0, srs, scs, drs, dcs, off, src_base, dst_base }
    "reduce" => ReduceParams { n, base, same_base, follow_base, c, d, r, row_lo, row_hi }
    "segment_max" => SegmentMaxParams { rows, f, row0, ptr_base, edge_base, out_base, t0, t1, in_base, first, lanes }
    "segment_softmax" => SegmentSoftmaxParams { num_dst, heads, d0, ptr_base, e_base, long_deg, num_long }
    "segment_sum" => SegmentSumParams { rows, f, mean, row0, ptr_base, tptr_base, edge_base, out_base, t0, t1, in_base, first, last, lanes }
    "segment_weighted_sum" => SegmentWeightedSumParams { rows, cols, heads, per_head, row0, ptr_base, edge_base, w_base, out_base, t0, t1, in_base, a0, a1, a_base, first, lanes }
    "sgd" => SgdParams { n, base, lr, mu, wd, first }
    "slice" => SliceParams { n, base, c, start, len, dim, src_base, dst_base }
    "unary" => UnaryParams { n, base, op, param }
    "widen" => WidenParams { n }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `(name, is u32)` of the members of the WGSL `struct Params` of `stem`.
    fn wgsl_fields(stem: &str) -> Option<Vec<(String, bool)>> {
        let path = format!("{}/shaders/{stem}.wgsl", env!("CARGO_MANIFEST_DIR"));
        let source = std::fs::read_to_string(&path).unwrap();
        let (module, _) = crate::device::wgpu_shader::module(stem, &source).unwrap();
        let (_, ty) = module
            .types
            .iter()
            .find(|(_, t)| t.name.as_deref() == Some("Params"))?;
        let naga::TypeInner::Struct { members, .. } = &ty.inner else {
            panic!("{path}: Params is not a struct");
        };
        Some(
            members
                .iter()
                .map(|m| {
                    let u32 = matches!(
                        module.types[m.ty].inner,
                        naga::TypeInner::Scalar(naga::Scalar {
                            kind: naga::ScalarKind::Uint,
                            width: 4
                        })
                    );
                    (m.name.clone().unwrap_or_default(), u32)
                })
                .collect(),
        )
    }

    #[test]
    fn every_params_struct_matches_its_wgsl_struct_field_by_field() {
        for (stem, fields) in ALL {
            let wgsl = wgsl_fields(stem)
                .unwrap_or_else(|| panic!("shaders/{stem}.wgsl declares no struct Params"));
            let names: Vec<&str> = wgsl.iter().map(|(n, _)| n.as_str()).collect();
            assert_eq!(
                names, *fields,
                "shaders/{stem}.wgsl's Params and its Rust struct differ"
            );
            for (name, u32) in &wgsl {
                assert!(u32, "shaders/{stem}.wgsl: Params.{name} is not a u32");
            }
        }
    }

    #[test]
    fn every_shader_with_params_has_a_rust_struct() {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/shaders");
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            let stem = path.file_stem().unwrap().to_string_lossy().to_string();
            if path.extension().and_then(|e| e.to_str()) != Some("wgsl") || stem == "prelude" {
                continue;
            }
            if wgsl_fields(&stem).is_some() {
                assert!(
                    ALL.iter().any(|(s, _)| *s == stem),
                    "shaders/{stem}.wgsl has no Rust Params struct in params.rs"
                );
            }
        }
    }

    #[test]
    fn a_prefix_of_other_names_is_refused_and_a_matching_one_is_set() {
        let mut p = UnaryParams {
            op: 3,
            ..Default::default()
        };
        set_prefix(&mut p, &["n", "base"], &[7, 9]).unwrap();
        assert_eq!(words(&p), &[7, 9, 3, 0]);
        let e = set_prefix(&mut p, &["n", "base", "same_base"], &[1, 2, 3])
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("shaders/unary.wgsl") && e.contains("same_base"),
            "{e}"
        );
    }
}
