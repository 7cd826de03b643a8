set terminal pngcairo size 900,500 font 'sans,10'
set output 'store_writes.png'
set style data histograms
set style histogram errorbars gap 2 lw 1
set style fill solid 0.6 border -1
set grid ytics
set xtics rotate by -25 left noenhanced
set key off
set title 'Store writes per event (median, min-max); the naive baseline writes 1'
set ylabel 'writes per event'
set logscale y
set yrange [*:1.5]
plot 'store_writes.dat' using 2:3:4:xtic(1)
