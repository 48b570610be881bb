//! Images for the media tests and benches: a PNG that declares a huge canvas in a few hundred
//! KB (a decompression bomb), written by hand so that making it costs nothing — one deflate
//! block whose codes are one or two bits long, so 258 zero bytes cost two bits.

/// A PNG of `width` × `height` black 8-bit RGB pixels: `width` × `height` × 3 bytes once
/// decoded, from a file about a thousandth of that (16000 × 10000: 465 KB for 480 MB).
pub fn png_bomb(width: u32, height: u32) -> Vec<u8> {
    // Each row is a filter byte (0: none) and its pixels, all zero.
    let raw = (u64::from(width) * 3 + 1) * u64::from(height);
    let mut zlib = vec![0x78, 0x01];
    zlib.extend(deflate_zeros(raw));
    // Adler-32 of zeros: the sum stays 1, the sum of sums counts the bytes.
    let adler = ((raw % 65521) << 16) | 1;
    zlib.extend((adler as u32).to_be_bytes());
    let mut header = Vec::new();
    header.extend(width.to_be_bytes());
    header.extend(height.to_be_bytes());
    header.extend([8, 2, 0, 0, 0]); // 8-bit RGB, deflate, adaptive filters, not interlaced
    let mut png = b"\x89PNG\r\n\x1a\n".to_vec();
    chunk(&mut png, b"IHDR", &header);
    chunk(&mut png, b"IDAT", &zlib);
    chunk(&mut png, b"IEND", &[]);
    png
}

/// A PNG chunk: length, type, data, CRC-32 of type and data.
fn chunk(png: &mut Vec<u8>, kind: &[u8; 4], data: &[u8]) {
    png.extend((data.len() as u32).to_be_bytes());
    png.extend(kind);
    png.extend(data);
    let mut crc = !0u32;
    for &byte in kind.iter().chain(data) {
        crc ^= u32::from(byte);
        for _ in 0..8 {
            crc = if crc & 1 == 1 {
                (crc >> 1) ^ 0xEDB8_8320
            } else {
                crc >> 1
            };
        }
    }
    png.extend((!crc).to_be_bytes());
}

/// `count` zero bytes as one final deflate block with its own Huffman codes: literal 0 (`10`),
/// end of block (`11`) and length 258 (`0`); distance 1 (`0`, and an unused `1` to make the
/// code complete). A zero, then a copy of 258 bytes one back, again and again.
fn deflate_zeros(count: u64) -> Vec<u8> {
    let mut out = Bits::default();
    out.put(1, 1); // the last block
    out.put(2, 2); // dynamic Huffman codes
    out.put(286 - 257, 5); // literal/length codes 0..=285
    out.put(2 - 1, 5); // distance codes 0..=1
    out.put(18 - 4, 4); // code length codes given, in the order below
    // Code length code: 18 (a run of zeros) `0`, length 1 `10`, length 2 `11`.
    const ORDER: [usize; 18] = [16, 17, 18, 0, 8, 7, 9, 6, 10, 5, 11, 4, 12, 3, 13, 2, 14, 1];
    for symbol in ORDER {
        out.put(
            match symbol {
                18 => 1,
                1 | 2 => 2,
                _ => 0,
            },
            3,
        );
    }
    // The code lengths of the two alphabets, in that code.
    let length = |out: &mut Bits, bits: u32| out.code(if bits == 1 { 0b10 } else { 0b11 }, 2);
    let unused = |out: &mut Bits, run: u32| {
        out.code(0, 1);
        out.put(run - 11, 7);
    };
    length(&mut out, 2); // literal 0
    unused(&mut out, 138);
    unused(&mut out, 117); // literals 1..=255
    length(&mut out, 2); // end of block
    unused(&mut out, 28); // lengths 257..=284
    length(&mut out, 1); // length 258
    length(&mut out, 1); // distance 1
    length(&mut out, 1); // distance 2
    // The data.
    let literal_zero = |out: &mut Bits| out.code(0b10, 2);
    literal_zero(&mut out);
    let mut left = count - 1;
    while left >= 258 {
        out.code(0, 1); // length 258
        out.code(0, 1); // distance 1
        left -= 258;
    }
    for _ in 0..left {
        literal_zero(&mut out);
    }
    out.code(0b11, 2); // end of block
    out.finish()
}

/// A deflate bit stream: fields least significant bit first, Huffman codes most significant
/// bit first.
#[derive(Default)]
struct Bits {
    bytes: Vec<u8>,
    current: u8,
    used: u32,
}

impl Bits {
    /// `value`'s low `count` bits, least significant first.
    fn put(&mut self, value: u32, count: u32) {
        for bit in 0..count {
            self.current |= (((value >> bit) & 1) as u8) << self.used;
            self.used += 1;
            if self.used == 8 {
                self.bytes.push(self.current);
                (self.current, self.used) = (0, 0);
            }
        }
    }

    /// A Huffman code of `length` bits, most significant first.
    fn code(&mut self, code: u32, length: u32) {
        for bit in (0..length).rev() {
            self.put(code >> bit, 1);
        }
    }

    fn finish(mut self) -> Vec<u8> {
        if self.used > 0 {
            self.bytes.push(self.current);
        }
        self.bytes
    }
}
