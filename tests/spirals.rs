//! A small MLP learns two interleaved spirals (not linearly separable) with Adam.

use espalier::nn::{Activation, Mlp, Module};
use espalier::rng::Rng;
use espalier::train::{Adam, Optimizer};
use espalier::{ops, Device, Tensor};

fn spirals(n: usize, seed: u64) -> (Vec<f32>, Vec<u32>) {
    let mut rng = Rng::new(seed);
    let (mut x, mut y) = (Vec::new(), Vec::new());
    for i in 0..n {
        let class = (i % 2) as u32;
        let t = 0.25 + 3.0 * (i / 2) as f64 / (n / 2) as f64; // radius and angle grow together
        let angle = t * std::f64::consts::PI + class as f64 * std::f64::consts::PI;
        let mut noise = || (rng.uniform() - 0.5) * 0.05;
        x.push((t * angle.cos() + noise()) as f32);
        x.push((t * angle.sin() + noise()) as f32);
        y.push(class);
    }
    (x, y)
}

#[test]
fn mlp_learns_two_spirals_with_adam() {
    let n = 400;
    let (x, y) = spirals(n, 1);
    let xt = Tensor::from_f32(x, &[n, 2], Device::Cpu).unwrap();
    let yt = Tensor::from_u32(y.clone(), &[n], Device::Cpu).unwrap();
    let mut rng = Rng::new(2);
    let mlp = Mlp::new(&[2, 64, 64, 2], Activation::Tanh, &mut rng, Device::Cpu).unwrap();
    let mut opt = Adam::new(mlp.parameters(), 0.01, 0.0).unwrap();
    let mut first_loss = None;
    for _ in 0..1500 {
        let loss = ops::cross_entropy(&mlp.forward(&xt).unwrap(), &yt, None).unwrap();
        first_loss.get_or_insert(loss.item().unwrap());
        loss.backward().unwrap();
        opt.step().unwrap();
        opt.zero_grad();
    }
    let pred = ops::argmax_rows(&mlp.forward(&xt).unwrap())
        .unwrap()
        .to_vec_u32()
        .unwrap();
    let acc = pred.iter().zip(&y).filter(|(p, t)| p == t).count() as f64 / n as f64;
    let final_loss = ops::cross_entropy(&mlp.forward(&xt).unwrap(), &yt, None)
        .unwrap()
        .item()
        .unwrap();
    assert!(
        acc >= 0.97,
        "accuracy {acc} (loss {} -> {final_loss})",
        first_loss.unwrap()
    );
}
