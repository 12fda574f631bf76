//! How a declared feature is standardised: a fixed `(x − center) / scale`, or `auto` — the mean
//! and standard deviation of the training folds ([`Moments`], measured while the cache is built;
//! `auto_scales.rs` applies them to a declaration's columns).

use serde::{Deserialize, Serialize};

/// (x − center) / scale.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Scale {
    /// Subtracted first (default 0).
    #[serde(default)]
    pub center: f64,
    /// Divides after (default 1).
    #[serde(default = "one")]
    pub scale: f64,
}

fn one() -> f64 {
    1.0
}

impl Scale {
    /// `(x − center) / scale` in f64.
    pub fn apply(self, x: f64) -> f64 {
        (x - self.center) / self.scale
    }
}

/// How a declared feature is standardised: `{center, scale}` fixed in the declaration, or
/// `auto`: the training folds' mean and standard deviation.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Standardize {
    /// Fixed in the declaration; applied as the cache is written.
    Fixed(Scale),
    /// From the training folds; the cache holds the raw value and a model's reader applies it.
    Auto,
}

impl Serialize for Standardize {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Standardize::Fixed(scale) => scale.serialize(s),
            Standardize::Auto => s.serialize_str("auto"),
        }
    }
}

impl<'de> Deserialize<'de> for Standardize {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Standardize, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = Standardize;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("`auto` or `{center, scale}`")
            }
            fn visit_str<E: serde::de::Error>(self, s: &str) -> Result<Standardize, E> {
                if s == "auto" {
                    Ok(Standardize::Auto)
                } else {
                    Err(E::custom(format!(
                        "standardize: expected `auto` or `{{center, scale}}`, got '{s}'"
                    )))
                }
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                map: A,
            ) -> Result<Standardize, A::Error> {
                Scale::deserialize(serde::de::value::MapAccessDeserializer::new(map))
                    .map(Standardize::Fixed)
            }
        }
        d.deserialize_any(V)
    }
}

/// Count, mean and sum of squared deviations of a feature's values (Welford; merged with Chan's
/// formula), in f64.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Moments {
    /// Values seen.
    pub count: u64,
    /// Their mean.
    pub mean: f64,
    /// Σ (x − mean)².
    pub m2: f64,
}

impl Moments {
    /// The moments of `values` (two passes: the mean, then the deviations).
    pub fn of(values: impl Iterator<Item = f64> + Clone) -> Moments {
        let (count, sum) = values.clone().fold((0u64, 0.0), |(n, s), x| (n + 1, s + x));
        if count == 0 {
            return Moments::default();
        }
        let mean = sum / count as f64;
        let m2 = values.map(|x| (x - mean) * (x - mean)).sum();
        Moments { count, mean, m2 }
    }

    /// These moments and `other`'s together.
    pub fn merge(self, other: Moments) -> Moments {
        if self.count == 0 {
            return other;
        }
        if other.count == 0 {
            return self;
        }
        let (na, nb) = (self.count as f64, other.count as f64);
        let n = na + nb;
        let delta = other.mean - self.mean;
        Moments {
            count: self.count + other.count,
            mean: self.mean + delta * nb / n,
            m2: self.m2 + other.m2 + delta * delta * na * nb / n,
        }
    }

    /// Mean and (population) standard deviation as a [`Scale`]; a constant feature keeps scale
    /// 1. `None` without values.
    pub fn scale(self) -> Option<Scale> {
        if self.count == 0 {
            return None;
        }
        let std = (self.m2 / self.count as f64).sqrt();
        Some(Scale {
            center: self.mean,
            scale: if std.is_finite() && std > 0.0 {
                std
            } else {
                1.0
            },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn merged_moments_equal_those_of_all_values() {
        let a = [1.0, 2.5, -3.0, 7.25];
        let b = [10.0, 11.0, 0.5];
        let all = Moments::of(a.iter().chain(&b).copied());
        let merged = Moments::of(a.iter().copied()).merge(Moments::of(b.iter().copied()));
        assert_eq!(all.count, merged.count);
        assert!((all.mean - merged.mean).abs() < 1e-12);
        assert!((all.m2 - merged.m2).abs() < 1e-9);
        let s = all.scale().expect("values");
        let mean = a.iter().chain(&b).sum::<f64>() / 7.0;
        let var = a.iter().chain(&b).map(|x| (x - mean).powi(2)).sum::<f64>() / 7.0;
        assert!((s.center - mean).abs() < 1e-12 && (s.scale - var.sqrt()).abs() < 1e-12);
        assert_eq!(Moments::of(std::iter::empty()).scale(), None);
        assert_eq!(
            Moments::of([4.0, 4.0].into_iter()).scale().map(|s| s.scale),
            Some(1.0)
        );
    }

    #[test]
    fn standardize_reads_auto_or_a_fixed_scale_and_names_a_wrong_word() {
        let s: Standardize = serde_yaml::from_str("auto").expect("auto");
        assert_eq!(s, Standardize::Auto);
        let s: Standardize = serde_yaml::from_str("{scale: 100}").expect("fixed");
        assert_eq!(
            s,
            Standardize::Fixed(Scale {
                center: 0.0,
                scale: 100.0
            })
        );
        let e = serde_yaml::from_str::<Standardize>("mean").unwrap_err();
        assert!(e.to_string().contains("got 'mean'"), "{e}");
        assert!(serde_yaml::from_str::<Standardize>("{scal: 1}").is_err());
        assert_eq!(
            serde_yaml::to_string(&Standardize::Auto)
                .expect("yaml")
                .trim(),
            "auto"
        );
    }
}
