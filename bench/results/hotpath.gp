set terminal pngcairo size 900,500 font 'sans,10'
set output 'hotpath.png'
set style data histograms
set style histogram errorbars gap 2 lw 1
set style fill solid 0.6 border -1
set grid ytics
set xtics rotate by -25 left noenhanced
set key off
set title 'Hot path: CPU ns per event (median, min-max), lower is better'
set ylabel 'ns per event'
set logscale y
plot 'hotpath.dat' using 2:3:4:xtic(1)
